"""Partial-depth trials: what a preset's full depth needs, from fewer layers.

Pure: reports in, JSON-serialisable data out; no Slack, no SQL, no clock.
A trial of `llm-infer preset=llama-3-8b layers=2` runs the real model's width,
vocabulary and attention layout at 2 of its 32 layers. Two routes to the full
depth, each labelled with what it rests on (docs/design.md §3, "Depth"):

* one trial (`from_trial`): the measured peak at L layers plus (F − L) times
  one layer's weights and KV cache by the decoder's arithmetic
  (worker/arithmetic.py). It assumes nothing else grows with depth: at
  inference a layer's activations are freed before the next layer runs, and
  the logits, embedding and lm head are there once.
* a depth sweep (`fit_depth`, `/trial sweep llm-infer ... layers=1,2,4`):
  peak = fixed + per_layer·L by least squares on measured points, the same
  fit (bot/fits/ols.fit_target) as a batch sweep; the deepest point held out
  checks it.

From a predicted full-depth peak at the trial's batch b0, the "fits on" list
asks each GPU in bot/fits/gpus.py's table for its largest batch under a bound that
errs toward fitting less: peak(b) = weights + b·KV per sequence +
R·max(1, b/b0), with R the measured rest (activations, logits, workspace) at
b0 — kept whole below b0, grown in proportion above it.

Decode time on a GPU the trial did not run on is a *model estimate*, never
mixed with measurements: memory-bound decode reads every weight and the KV
cache filled so far once per step, so a step takes at least bytes ÷ the
datasheet's peak bandwidth.
"""
from __future__ import annotations

import math

from bot.fits import gpus, ols, scaling, usable
from worker import arithmetic, presets, summary
from worker.spec import LIVE_TIME_NOTE

SCHEMA = "trialbot.depth/1"
# The kernel's max RSS too: an exact high-water mark, where 100 Hz sampling can
# miss a prefill's short-lived peak once freed memory leaves RSS (malloc=live).
METHODS = (*scaling.METHODS, "host_rss_peak_kernel")
WHAT = {**scaling.METHOD_WHAT,
        "host_rss_peak_kernel": "the kernel's max RSS of the trial's process (exact "
                                "high-water mark, CPU side)"}
# Answers "what fits a GPU" from the most inclusive GPU figure measured: NVML's
# per-process use holds the CUDA context, reserved holds the allocator's cache.
FIT_METHODS = ("process_used_peak", "peak_reserved", "peak_allocated")
MAX_BATCH = 1_000_000


layer_bytes = arithmetic.layer_bytes


def full_params(p: dict) -> dict | None:
    """p at the preset's full depth; None without a preset."""
    preset = presets.get(p.get("preset") or "none")
    return {**p, **presets.full_shape(preset.name)} if preset else None


def arithmetic_at(p: dict) -> dict:
    """Weights and KV cache of p by arithmetic: the parts that do not depend on
    how the runtime is built."""
    seq = arithmetic.kv_bytes_per_token(p) * (p["prompt"] + p["gen"])
    return {"weights": arithmetic.weight_bytes(p), "kv_per_sequence": seq,
            "kv": seq * p["batch"]}


# --- one trial ----------------------------------------------------------------

def from_trial(r: dict) -> dict | None:
    """A full-depth prediction from one ok llm-infer trial with `preset=`;
    None for any other report."""
    if (r or {}).get("workload") != "llm-infer" or r.get("status") != "ok":
        return None
    p = r.get("params") or {}
    full = full_params(p)
    if full is None:
        return None
    depth, deep = p["layers"], full["layers"]
    per_layer = layer_bytes(p)
    mem = r.get("memory") or {}
    # On a GPU the weights and KV cache live in device memory: host RSS is shown
    # as measured, never extrapolated by them.
    on_gpu = any(mem.get(m) is not None for m in FIT_METHODS)
    predicted = {}
    for m in METHODS:
        if mem.get(m) is None:
            continue
        grows = not on_gpu or m in FIT_METHODS
        predicted[m] = {"measured": mem[m], "layers": depth,
                        "predicted": mem[m] + (deep - depth) * per_layer["total"] if grows
                        else None}
    out = {"schema": SCHEMA, "source": "trial", "preset": p["preset"], "trial": r.get("trial"),
           "trial_layers": depth, "layers": deep, "per_layer": per_layer,
           "memory": predicted,
           "what": (f"measured at {depth} layer{'s' * (depth != 1)} + ({deep} − {depth}) × "
                    "one layer's weights "
                    "and KV cache by arithmetic; assumes activations, logits and workspace "
                    "do not grow with depth (inference frees each layer's activations); "
                    "not checked by a depth sweep" if depth < deep else
                    f"measured at the full {deep} layers: nothing predicted")}
    out["fits"] = fits_on(full, {m: v["predicted"] for m, v in predicted.items()},
                          measured=depth == deep)
    out["decode"] = decode_estimate(full)
    return out


def partial(r: dict) -> str | None:
    """"T12: 2 of 32 layers of llama-3-8b" for a partial-depth trial's report."""
    p = (r or {}).get("params") or {}
    full = full_params(p) if r.get("workload") in ("llm-infer", "llm-train") else None
    if not full or p["layers"] >= full["layers"]:
        return None
    name = r.get("trial") or "the trial"
    return f"{name}: {p['layers']} of {full['layers']} layers of {p['preset']}"


def time_factor(p: dict) -> dict:
    """A model for a partial-depth trial's time at full depth: the ratio of the
    parameters every token passes through (layers and lm head; the embedding is
    a lookup). Decode reads them and prefill multiplies by them, so time scales
    with them to first order; attention over the context is not in it."""
    full = full_params(p)

    def through(q):
        w = arithmetic.weight_params(q)
        return w["layers"] + w["final_norm"] + w["lm_head"]
    k = through(full) / through(p)
    # Building random weights takes time in proportion to all of them.
    w = arithmetic.weight_params(full)["total"] / arithmetic.weight_params(p)["total"]
    return {"factor": k, "weights_factor": w,
            "what": (f"scaled ×{k:.3g} from {p['layers']} to {full['layers']} layers by the "
                     "parameters each token passes through (layers + lm head): a model "
                     "estimate, not measured (an llm-infer depth sweep measures it)")}


# --- a depth sweep --------------------------------------------------------------

def is_depth_sweep(reports: list[dict]) -> bool:
    """Depths asked for, failed trials included: one ok depth is still a depth sweep."""
    reports = [r for r in reports if r]
    return (bool(reports) and reports[0].get("workload") == "llm-infer"
            and len({(r.get("params") or {}).get("layers") for r in reports}) > 1)


def fit_depth(reports: list[dict]) -> dict:
    """Peak memory (each method) and time per request against depth:
    fixed + per_layer·L, fitted on the sweep's ok trials."""
    reports = [r for r in reports if r]
    ok = [r for r in reports if r.get("status") == "ok"]
    out = {"schema": SCHEMA, "kind": "depth", "source": "sweep", "workload": "llm-infer",
           "preset": None, "defaults": {}, "points": [], "failed": [], "memory": {},
           "time": None, "decode": None, "per_layer": None, "workers": [], "notes": [],
           "allocators": {}, "error": None}
    for r in reports:
        if r.get("status") != "ok":
            err = r.get("error") or {}
            out["failed"].append({"trial": r.get("trial"),
                                  "layers": (r.get("params") or {}).get("layers"),
                                  "error_class": err.get("class")})
    if not ok:
        out["error"] = "no trial of the sweep succeeded: nothing to fit"
        return out
    first = ok[0]["params"]
    out["defaults"] = {k: v for k, v in first.items() if k != "layers"
                       and all(r["params"].get(k) == v for r in ok)}
    other = sorted(k for k in first if k != "layers" and k not in out["defaults"]
                   and k not in scaling.MEASUREMENT_PARAMS)
    if other:
        out["error"] = (f"the trials differ in {', '.join(other)} as well as layers: a depth "
                        "sweep varies layers alone")
        return out
    out["preset"] = first.get("preset") if first.get("preset") != "none" else None
    out["per_layer"] = layer_bytes(first)
    for r in ok:
        secs, _ = scaling.seconds_of(r)
        dec = (r.get("decode_per_token") or {}).get("mean")
        out["points"].append({"trial": r.get("trial"), "layers": r["params"]["layers"],
                              "memory": {m: (r.get("memory") or {}).get(m) for m in METHODS},
                              "seconds": secs, "decode": dec, "marks": usable.marks(r)})
    workers = sorted({(r.get("worker") or "?", scaling.device_of(r)) for r in ok})
    out["workers"] = [{"worker": w, "device": d} for w, d in workers]
    if len(workers) > 1:
        out["notes"].append(f"the trials ran on {len(workers)} workers/devices: their times "
                            "are fitted together; rerun on one worker for a clean fit")
    out["allocators"] = scaling.allocators(ok)
    live = [r.get("trial") or "?" for r in ok if summary.timed_live_on_cpu(r)]
    if live:
        out["notes"].append(f"{usable.names(live)} timed on the CPU under malloc=live: "
                            f"{LIVE_TIME_NOTE}, and so does the time fit; re-run the sweep "
                            "with malloc=auto (or without malloc=) for glibc's times")
    if len({p["layers"] for p in out["points"]}) < 2:
        out["error"] = "1 distinct depth succeeded: at least 2 are needed to fit anything"
        return out
    for m in METHODS:
        rows = [(p["layers"], 1, p["memory"][m], p["trial"]) for p in out["points"]
                if p["memory"].get(m) is not None]
        if rows:
            out["memory"][m] = ols.fit_target(rows, "memory", "b", m, "bytes", WHAT[m])
    for key, what in (("seconds", "mean latency per request (prefill + decode of the batch)"),
                      ("decode", "mean decode step (one token for the whole batch)")):
        rows = [(p["layers"], 1, p[key], p["trial"]) for p in out["points"]
                if p[key] is not None]
        if rows:
            out["time" if key == "seconds" else "decode"] = ols.fit_target(
                rows, "time", "b", key, "s", what)
    for model in [*out["memory"].values(), out["time"], out["decode"]]:
        if model:
            model["verdict"] = usable.verdict(model, out["points"], axis="layers")
    return out


def question_layers(fit: dict, params: dict) -> int:
    """The depth a question asks about; the sweep held everything else, so any
    other parameter must be the value it held."""
    for k, v in params.items():
        if k != "layers" and k not in scaling.MEASUREMENT_PARAMS and k in fit["defaults"] \
                and fit["defaults"][k] != v:
            raise ValueError(f"the depth sweep measured {k}={fit['defaults'][k]} only; a "
                             f"prediction at {k}={v} needs a sweep at that value")
    if "layers" not in params:
        raise ValueError("a depth sweep predicts a depth: give layers=N")
    return params["layers"]


def predict(model: dict, layers: int, level: float = 0.90, points: list = ()) -> dict:
    """A depth model's value at `layers`, with its interval when the fit has
    residual degrees of freedom."""
    value, se, dof = ols.predict_model(model, layers, 1)
    return {"value": value, "interval": ols.interval(value, se, dof, level) if dof else None,
            "dof": dof, "verdict": usable.verdict(model, list(points), (layers, 1, value),
                                                "layers")
            if model.get("trials") is not None else None}


def slope(model: dict) -> float:
    """The fitted per-layer part (the coefficient of L)."""
    return model["coef"][model["features"].index("b")]


def from_sweep(fit: dict, layers: int | None = None) -> dict:
    """The depth sweep's prediction at `layers` (the preset's full depth by
    default): memory per method, time, and the fits-on list."""
    d = fit["defaults"]
    full = full_params({**d, "layers": 1}) if fit.get("preset") else None
    layers = layers or (full or {}).get("layers")
    if layers is None:
        raise ValueError("the sweep has no preset, so there is no full depth to predict: "
                         "ask for a depth, e.g. `/trial fit S12 layers=32`")
    if full and layers > full["layers"]:
        raise ValueError(f"{fit['preset']} has {full['layers']} layers; ask for "
                         f"layers=1..{full['layers']}")
    at = {**d, "layers": layers}
    pts = fit.get("points") or []
    mem = {m: predict(model, layers, points=pts) for m, model in fit["memory"].items()
           if not model.get("error")}
    # An unusable prediction answers no "fits on" question.
    good = {m: v for m, v in mem.items() if (v.get("verdict") or {}).get("usable", True)}
    return {"layers": layers, "memory": mem,
            "time": predict(fit["time"], layers, points=pts) if fit.get("time") and
            not fit["time"].get("error") else None,
            # What fits is judged on the interval's upper end where the fit has one.
            "fits": fits_on(at, {m: v["interval"][1] if v["interval"] else v["value"]
                                 for m, v in good.items()},
                            bounded={m for m, v in good.items() if v["interval"]}),
            "decode_estimate": decode_estimate(at),
            "fits_note": ("the GPU memory fits are unusable (above), so this list falls back "
                          "to the arithmetic" if any(m in FIT_METHODS for m in mem)
                          and not any(m in FIT_METHODS for m in good) else None)}


# --- what fits where ------------------------------------------------------------

def largest_batch(capacity: int, weights: float, kv_seq: float, rest: float, b0: int) -> int:
    """The largest b with weights + b·kv_seq + rest·max(1, b/b0) ≤ capacity; 0 if none."""
    if weights + kv_seq + rest > capacity:
        return 0
    below = math.floor((capacity - weights - rest) / kv_seq) if kv_seq > 0 else MAX_BATCH
    if below < b0:
        return max(1, below)
    grow = kv_seq + rest / b0
    above = math.floor((capacity - weights) / grow) if grow > 0 else MAX_BATCH
    return min(MAX_BATCH, max(b0, above))


def fits_on(p: dict, peaks: dict, measured: bool = False, bounded: set = frozenset()) -> dict:
    """Each GPU of the table against a predicted peak at p (full depth, the
    trial's batch b0): margin at b0 and the largest batch. From a measured GPU
    figure when there is one; otherwise from the arithmetic alone, labelled a
    lower bound (a CPU trial measures no GPU memory)."""
    a = arithmetic_at(p)
    b0 = p["batch"]
    method = next((m for m in FIT_METHODS if peaks.get(m) is not None), None)
    if method:
        peak = peaks[method]
        rest = max(0.0, peak - a["weights"] - a["kv"])
        caveat = scaling.GPU_CAVEAT[method]
        figure = ("measured" if measured else
                  "predicted, the upper end of the fit's 90% prediction interval"
                  if method in bounded else "predicted (a point figure, no interval)")
        basis = (f"{WHAT[method]}, {figure}; above batch {b0} the measured rest (activations, "
                 "logits, workspace) is grown in proportion, below it kept whole"
                 + (f"; {caveat}" if caveat else ""))
    else:
        peak, rest = a["weights"] + a["kv"], 0.0
        basis = ("arithmetic lower bound: weights + KV cache only — activations, workspace "
                 "and the CUDA context are not in it (this trial measured no GPU memory), "
                 "so a GPU shown as fitting may not; the largest batch is an upper bound")
    out = {"method": method, "basis": basis, "peak": peak, "batch": b0,
           "weights": a["weights"], "kv_per_sequence": a["kv_per_sequence"], "rest": rest}
    out["gpus"] = sorted((fit_row(out, g) for g in gpus.TABLE.values()),
                         key=lambda x: x["bytes"])
    return out


def fit_row(fits: dict, gpu: gpus.Gpu) -> dict:
    """One GPU against a fits-on answer: margin at its batch, the largest batch."""
    return {"gpu": gpu.name, "bytes": gpu.bytes, "margin": gpu.bytes - fits["peak"],
            "fits": fits["peak"] <= gpu.bytes,
            "largest_batch": largest_batch(gpu.bytes, fits["weights"], fits["kv_per_sequence"],
                                           fits["rest"], fits["batch"])}


def decode_bytes(p: dict) -> float:
    """Bytes one decode step reads at p: every layer's, the final norm's and the
    lm head's weights once, one embedding row per sequence (a lookup, not the
    whole table), and the KV cache as filled on average over the decode
    (prompt + gen/2 positions per sequence)."""
    n = arithmetic.DTYPE_BYTES[p["dtype"]]
    w = arithmetic.weight_params(p)
    weights = (w["total"] - w["embedding"] + p["batch"] * p["hidden"]) * n
    filled = p["prompt"] + p["gen"] / 2
    return weights + arithmetic.kv_bytes_per_token(p) * filled * p["batch"]


def decode_estimate(p: dict) -> dict:
    """Model estimate of one decode step at p on each GPU with a datasheet
    bandwidth: a floor, not a measurement."""
    nbytes = decode_bytes(p)
    rows = [{"gpu": g.name, "bandwidth_gbs": sorted(g.bandwidth_gbs, reverse=True),
             "seconds": [nbytes / (bw * 1e9) for bw in sorted(g.bandwidth_gbs, reverse=True)],
             "note": g.note}
            for g in gpus.TABLE.values() if g.bandwidth_gbs]
    return {"bytes_per_step": nbytes, "batch": p["batch"], "gpus": rows,
            "what": ("model estimate, not measured: memory-bound decode reads every layer's and "
                     "the lm head's weights (one embedding row per sequence) and the KV cache "
                     "filled so far once per step; step ≥ bytes ÷ the datasheet's "
                     "peak bandwidth, so real steps are slower (kernels reach a fraction of "
                     "peak, and small batches add launch overhead)"),
            "no_bandwidth": [g.name for g in gpus.TABLE.values() if not g.bandwidth_gbs]}
