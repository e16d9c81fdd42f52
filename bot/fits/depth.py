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
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from bot.fits import gpus, ols, scaling, usable
from bot.states import Json
from worker.api import LIVE_TIME_NOTE, arithmetic, presets, summary
from worker.i18n import N_, _, ngettext

SCHEMA = "trialbot.depth/1"
# The kernel's max RSS too, where it is not already host_rss_peak (a child that
# ran alone reports it as that): an exact high-water mark, where 100 Hz sampling
# can miss a prefill's short-lived peak once freed memory leaves RSS (malloc=live).
METHODS = (*scaling.METHODS, "host_rss_peak_kernel")
WHAT = {**scaling.METHOD_WHAT,
        "host_rss_peak_kernel": N_("the kernel's max RSS of the trial's process (exact "
                                   "high-water mark, CPU side)")}  # shown as _(WHAT[m])
# Answers "what fits a GPU" from the most inclusive GPU figure measured: NVML's
# per-process use holds the CUDA context, reserved holds the allocator's cache.
FIT_METHODS = ("process_used_peak", "peak_reserved", "peak_allocated")
MAX_BATCH = 1_000_000


INFER = ("llm-infer", "hf-infer")  # what a partial-depth prediction is of
DEPTHED = (*INFER, "llm-train", "hf-train")


def sizing_of(r: Mapping[str, Any]) -> Json | None:
    """The full-depth sizing (worker/arithmetic.py) behind a report or a fit:
    an hf-* trial's is counted by transformers and travels in its report; a
    preset's comes from the decoder's arithmetic. None for neither."""
    sizing: Json | None = r.get("sizing") or (r.get("full_depth") or {}).get("sizing")
    if sizing:  # a fit carries its trials'; an hf-* trial's report its own
        return sizing
    full = full_params(r.get("params") or r.get("defaults") or {})
    return arithmetic.decoder_sizing(full) if full else None


def full_params(p: Json) -> Json | None:
    """p at the preset's full depth; None without a preset."""
    preset = presets.get(p.get("preset") or "none")
    return {**p, **presets.full_shape(preset.name)} if preset else None


def name_of(p: Json) -> str | None:
    """The model a trial is of: its preset, or an hf-* trial's model=."""
    name: str | None = (p["preset"] if p.get("preset") not in (None, "none") else
                        p.get("model") if p.get("model") not in (None, "none") else None)
    return name


def layers_of(p: Json, s: Json) -> int:
    """The trial's depth (hf-*'s layers=0 is the config's own)."""
    layers: int = p.get("layers") or s["layers"]
    return layers


def _positions(p: Json) -> int:
    positions: int = p.get("prompt", p.get("seq", 0)) + p.get("gen", 0)
    return positions


def layer_bytes(p: Json, s: Json | None = None) -> Json:
    """One layer's weights and KV cache at p's batch and lengths (the mean layer
    of the sizing s; the built-in decoder's layers are all alike)."""
    s = s or arithmetic.decoder_sizing(p)
    n, count = arithmetic.DTYPE_BYTES[p["dtype"]], s["layers"]
    weights = arithmetic.sized_params(s)["layers"] * n / count
    kv = arithmetic.sized_kv(s, _positions(p), n) * p["batch"] / count
    return {"weights": weights, "kv": kv, "total": weights + kv}


def bytes_at(p: Json, s: Json, layers: int) -> float:
    """Weights and KV cache of the first `layers` layers at p."""
    n = arithmetic.DTYPE_BYTES[p["dtype"]]
    return float(arithmetic.sized_params(s, layers)["layers"] * n
            + arithmetic.sized_kv(s, _positions(p), n, layers) * p["batch"])


def arithmetic_at(p: Json, s: Json | None = None) -> Json:
    """Weights and KV cache of p (at its depth) by arithmetic: the parts that do
    not depend on how the runtime is built."""
    s = s or arithmetic.decoder_sizing(p)
    depth, n = layers_of(p, s), arithmetic.DTYPE_BYTES[p["dtype"]]
    seq = arithmetic.sized_kv(s, _positions(p), n, depth)
    return {"weights": arithmetic.sized_params(s, depth)["total"] * n, "kv_per_sequence": seq,
            "kv": seq * p["batch"]}


# --- one trial ----------------------------------------------------------------

def from_trial(r: Mapping[str, Any]) -> Json | None:
    """A full-depth prediction from one ok llm-infer trial with `preset=` or
    hf-infer trial; None for any other report."""
    if (r or {}).get("workload") not in INFER or r.get("status") != "ok":
        return None
    p = r.get("params") or {}
    s = sizing_of(r)
    if s is None:
        return None
    depth, deep = layers_of(p, s), s["layers"]
    full = {**(full_params(p) or p), "layers": deep}
    per_layer = layer_bytes(p, s)
    grown = bytes_at(p, s, deep) - bytes_at(p, s, depth)
    mem = r.get("memory") or {}
    # On a GPU the weights and KV cache live in device memory: host RSS is shown
    # as measured, never extrapolated by them.
    on_gpu = any(mem.get(m) is not None for m in FIT_METHODS)
    predicted = {}
    for m in methods([mem]):
        if mem.get(m) is None:
            continue
        grows = not on_gpu or m in FIT_METHODS
        predicted[m] = {"measured": mem[m], "layers": depth,
                        "predicted": mem[m] + grown if grows else None}
    what = (ngettext("measured at {n} layer + the other {other} layers' weights and KV cache "
                     "by arithmetic; assumes activations, logits and workspace do not grow with "
                     "depth (inference frees each layer's activations); not checked by a depth "
                     "sweep",
                     "measured at {n} layers + the other {other} layers' weights and KV cache "
                     "by arithmetic; assumes activations, logits and workspace do not grow with "
                     "depth (inference frees each layer's activations); not checked by a depth "
                     "sweep", depth, other=deep - depth) if depth < deep else
            _("measured at the full {deep} layers: nothing predicted", deep=deep))
    imported = (r.get("model") or {}).get("import_rss_bytes")
    if imported and not on_gpu:
        what += _(". Host RSS includes {mib} MiB that importing transformers added (host "
                  "memory: a GPU's memory holds none of it)", mib=format(imported / 2**20, ".0f"))
    out = {"schema": SCHEMA, "source": "trial", "preset": name_of(p), "trial": r.get("trial"),
           "trial_layers": depth, "layers": deep, "per_layer": per_layer,
           "memory": predicted, "workload": r["workload"], "what": what}
    out["fits"] = fits_on(full, {m: v["predicted"] for m, v in predicted.items()},
                          measured=depth == deep, s=s)
    out["decode"] = decode_estimate(full, s)
    return out


def partial(r: Json) -> str | None:
    """"T12: 2 of 32 layers of llama-3-8b" for a partial-depth trial's report."""
    p = (r or {}).get("params") or {}
    s = sizing_of(r) if r.get("workload") in DEPTHED else None
    if not s or layers_of(p, s) >= s["layers"]:
        return None
    name = r.get("trial") or _("the trial")
    return _("{trial}: {layers} of {deep} layers of {model}", trial=name,
             layers=layers_of(p, s), deep=s["layers"], model=name_of(p))


def full_layers(r: Json) -> int | None:
    """The full depth behind a report or a fit, if it has one."""
    s = sizing_of(r)
    return s["layers"] if s else None


def time_factor(p: Json, s: Json | None = None) -> Json:
    """A model for a partial-depth trial's time at full depth: the ratio of the
    parameters every token passes through (layers, the rest outside them and
    the lm head, which is the embedding when tied; the embedding itself is a
    lookup). Decode reads them and prefill multiplies by them, so time scales
    with them to first order; attention over the context is not in it."""
    s = s or sizing_of({"params": p})
    assert s is not None  # callers pass a preset's or an hf-* trial's parameters

    def through(layers: int) -> float:
        w = arithmetic.sized_params(s, layers)
        head = w["embedding"] if s.get("tied_embeddings") else w["lm_head"]
        passed: float = w["layers"] + w["other"] + head
        return passed
    depth = layers_of(p, s)
    k = through(s["layers"]) / through(depth)
    # Building random weights takes time in proportion to all of them.
    w = arithmetic.sized_params(s)["total"] / arithmetic.sized_params(s, depth)["total"]
    return {"factor": k, "weights_factor": w,
            "what": _("scaled ×{factor} from {depth} to {deep} layers by the parameters each "
                      "token passes through (layers + lm head): a model estimate, not measured "
                      "(a depth sweep measures it)", factor=format(k, ".3g"), depth=depth,
                      deep=s["layers"])}


# --- a depth sweep --------------------------------------------------------------

def is_depth_sweep(reports: list[Json]) -> bool:
    """Depths asked for, failed trials included: one ok depth is still a depth sweep."""
    reports = [r for r in reports if r]
    return (bool(reports) and reports[0].get("workload") in INFER
            and len({(r.get("params") or {}).get("layers") for r in reports}) > 1)


def fit_depth(reports: list[Json]) -> Json:
    """Peak memory (each method) and time per request against depth:
    fixed + per_layer·L, fitted on the sweep's ok trials."""
    reports = [r for r in reports if r]
    ok = [r for r in reports if r.get("status") == "ok"]
    out: Json = {"schema": SCHEMA, "kind": "depth", "source": "sweep",
           "workload": reports[0].get("workload") if reports else "llm-infer", "sizing": None,
           "preset": None, "defaults": {}, "points": [], "failed": [], "memory": {},
           "time": None, "decode": None, "per_layer": None, "workers": [], "notes": [],
           "allocators": {}, "error": None}
    out["failed"] += [{"trial": r.get("trial"), "layers": (r.get("params") or {}).get("layers"),
                       "error_class": (r.get("error") or {}).get("class")}
                      for r in reports if r.get("status") != "ok"]
    if not ok:
        out["error"] = _("no trial of the sweep succeeded: nothing to fit")
        return out
    first = ok[0]["params"]
    out["defaults"] = {k: v for k, v in first.items() if k != "layers"
                       and all(r["params"].get(k) == v for r in ok)}
    other = sorted(k for k in first if k != "layers" and k not in out["defaults"]
                   and k not in scaling.MEASUREMENT_PARAMS)
    if other:
        out["error"] = _("the trials differ in {params} as well as layers: a depth sweep "
                         "varies layers alone", params=", ".join(other))
        return out
    out["preset"] = name_of(first)
    out["sizing"] = sizing_of(ok[0]) or arithmetic.decoder_sizing(first)
    out["per_layer"] = layer_bytes(first, out["sizing"])
    out["points"] += [{"trial": r.get("trial"), "layers": r["params"]["layers"],
                       "memory": {m: (r.get("memory") or {}).get(m) for m in METHODS},
                       "seconds": scaling.seconds_of(r)[0],
                       "decode": (r.get("decode_per_token") or {}).get("mean"),
                       "marks": usable.marks(r)} for r in ok]
    _depth_notes(out, ok)
    if len({p["layers"] for p in out["points"]}) < 2:
        out["error"] = _("1 distinct depth succeeded: at least 2 are needed to fit anything")
        return out
    _fit_depth_models(out)
    return out


def _depth_notes(out: Json, ok: list[Json]) -> None:
    """The workers, the allocators, and notes on what mixes into the times."""
    workers = sorted({(r.get("worker") or "?", scaling.device_of(r)) for r in ok})
    out["workers"] = [{"worker": w, "device": d} for w, d in workers]
    if len(workers) > 1:
        out["notes"].append(_("the trials ran on {n} workers/devices: their times are fitted "
                              "together; rerun on one worker for a clean fit", n=len(workers)))
    out["allocators"] = scaling.allocators(ok)
    live = [r.get("trial") or "?" for r in ok if summary.timed_live_on_cpu(r)]
    if live:
        out["notes"].append(_("{trials} timed on the CPU under malloc=live: {note}, and so does "
                              "the time fit; re-run the sweep with malloc=auto (or without "
                              "malloc=) for glibc's times", trials=usable.names(live),
                              note=_(LIVE_TIME_NOTE)))


def methods(memories: list[Json]) -> list[str]:
    """METHODS, less the kernel's max RSS where every report's host_rss_peak is it."""
    same = all(m.get("host_rss_peak_kernel") == m.get("host_rss_peak") for m in memories)
    return [m for m in METHODS if not (same and m == "host_rss_peak_kernel")]


def _fit_depth_models(out: Json) -> None:
    """Each memory method, the time and the decode step against depth, with verdicts."""
    for m in methods([p["memory"] for p in out["points"]]):
        rows = [(p["layers"], 1, p["memory"][m], p["trial"]) for p in out["points"]
                if p["memory"].get(m) is not None]
        if rows:
            out["memory"][m] = ols.fit_target(rows, "memory", "b", m, "bytes", _(WHAT[m]))
    for key, what in (("seconds", _("mean latency per request (prefill + decode of the batch)")),
                      ("decode", _("mean decode step (one token for the whole batch)"))):
        rows = [(p["layers"], 1, p[key], p["trial"]) for p in out["points"]
                if p[key] is not None]
        if rows:
            out["time" if key == "seconds" else "decode"] = ols.fit_target(
                rows, "time", "b", key, "s", what)
    for model in [*out["memory"].values(), out["time"], out["decode"]]:
        if model:
            model["verdict"] = usable.verdict(model, out["points"], axis="layers")


def question_layers(fit: Json, params: Json) -> int:
    """The depth a question asks about; the sweep held everything else, so any
    other parameter must be the value it held."""
    for k, v in params.items():
        if k != "layers" and k not in scaling.MEASUREMENT_PARAMS and k in fit["defaults"] \
                and fit["defaults"][k] != v:
            raise ValueError(_("the depth sweep measured {k}={measured} only; a prediction at "
                               "{k}={v} needs a sweep at that value", k=k,
                               measured=fit["defaults"][k], v=v))
    if "layers" not in params:
        raise ValueError(_("a depth sweep predicts a depth: give layers=N"))
    layers: int = params["layers"]
    return layers


def predict(model: Json, layers: int, level: float = 0.90, points: Sequence[Json] = ()) -> Json:
    """A depth model's value at `layers`, with its interval when the fit has
    residual degrees of freedom."""
    value, se, dof = ols.predict_model(model, layers, 1)
    return {"value": value, "interval": ols.interval(value, se, dof, level) if dof else None,
            "dof": dof, "verdict": usable.verdict(model, list(points), (layers, 1, value),
                                                "layers")
            if model.get("trials") is not None else None}


def slope(model: Json) -> float:
    """The fitted per-layer part (the coefficient of L)."""
    per_layer: float = model["coef"][model["features"].index("b")]
    return per_layer


def from_sweep(fit: Json, layers: int | None = None) -> Json:
    """The depth sweep's prediction at `layers` (the preset's full depth by
    default): memory per method, time, and the fits-on list."""
    d = fit["defaults"]
    s = fit.get("sizing") if fit.get("preset") else None
    layers = layers or (s or {}).get("layers")
    if layers is None:
        raise ValueError(_("the sweep has no preset or model, so there is no full depth to "
                           "predict: ask for a depth, e.g. `/trial fit S12 layers=32`"))
    if s and layers > s["layers"]:
        raise ValueError(_("{model} has {deep} layers; ask for layers=1..{deep}",
                           model=fit["preset"], deep=s["layers"]))
    s = s or arithmetic.decoder_sizing({**d, "layers": layers})
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
                            bounded={m for m, v in good.items() if v["interval"]}, s=s),
            "decode_estimate": decode_estimate(at, s),
            "fits_note": (_("the GPU memory fits are unusable (above), so this list falls back "
                            "to the arithmetic") if any(m in FIT_METHODS for m in mem)
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


def fits_on(p: Json, peaks: Json, measured: bool = False,
            bounded: AbstractSet[str] = frozenset(), s: Json | None = None) -> Json:
    """Each GPU of the table against a predicted peak at p (full depth, the
    trial's batch b0): margin at b0 and the largest batch. From a measured GPU
    figure when there is one; otherwise from the arithmetic alone, labelled a
    lower bound (a CPU trial measures no GPU memory)."""
    a = arithmetic_at(p, s)
    b0 = p["batch"]
    method = next((m for m in FIT_METHODS if peaks.get(m) is not None), None)
    if method:
        peak = peaks[method]
        rest = max(0.0, peak - a["weights"] - a["kv"])
        caveat = scaling.GPU_CAVEAT[method]
        figure = (_("measured") if measured else
                  _("predicted, the upper end of the fit's 90% prediction interval")
                  if method in bounded else _("predicted (a point figure, no interval)"))
        values = dict(what=_(WHAT[method]), figure=figure, batch=b0)
        basis = (_("{what}, {figure}; above batch {batch} the measured rest (activations, "
                   "logits, workspace) is grown in proportion, below it kept whole; {caveat}",
                   caveat=_(caveat), **values) if caveat else
                 _("{what}, {figure}; above batch {batch} the measured rest (activations, "
                   "logits, workspace) is grown in proportion, below it kept whole", **values))
    else:
        peak, rest = a["weights"] + a["kv"], 0.0
        basis = _("arithmetic lower bound: weights + KV cache only — activations, workspace "
                  "and the CUDA context are not in it (this trial measured no GPU memory), so a "
                  "GPU shown as fitting may not; the largest batch is an upper bound")
    out = {"method": method, "basis": basis, "peak": peak, "batch": b0,
           "weights": a["weights"], "kv_per_sequence": a["kv_per_sequence"], "rest": rest,
           "dtype": p.get("dtype")}
    out["gpus"] = sorted((fit_row(out, g) for g in gpus.TABLE.values()),
                         key=lambda x: x["bytes"])
    return out


def fit_row(fits: Json, gpu: gpus.Gpu) -> Json:
    """One GPU against a fits-on answer: margin at its batch, the largest batch."""
    # Memory is not all: a bf16 model on a GPU without bf16 (V100, T4) does not "fit" there.
    no_dtype = fits.get("dtype") == "bf16" and gpu.bf16 is False
    return {"gpu": gpu.name, "bytes": gpu.bytes, "margin": gpu.bytes - fits["peak"],
            "fits": fits["peak"] <= gpu.bytes and not no_dtype,
            "no_dtype": (_("no bf16 ({why}); use dtype=fp16 or fp32 there", why=gpu.bf16_source)
                         if no_dtype else None),
            "largest_batch": largest_batch(gpu.bytes, fits["weights"], fits["kv_per_sequence"],
                                           fits["rest"], fits["batch"])}


def decode_bytes(p: Json, s: Json | None = None) -> float:
    """Bytes one decode step reads at p: every layer's, the rest's and the lm
    head's weights once, one embedding row per sequence (a lookup, not the
    whole table, unless it is the tied lm head), and the KV cache as filled on
    average over the decode (prompt + gen/2 positions per sequence)."""
    s = s or arithmetic.decoder_sizing(p)
    n, depth = arithmetic.DTYPE_BYTES[p["dtype"]], layers_of(p, s)
    w = arithmetic.sized_params(s, depth)
    looked_up = 0 if s.get("tied_embeddings") else w["embedding"]
    weights = (w["total"] - looked_up + p["batch"] * s["hidden"]) * n
    filled = p["prompt"] + p["gen"] / 2
    read: float = weights + arithmetic.sized_kv(s, filled, n, depth) * p["batch"]
    return read


def decode_estimate(p: Json, s: Json | None = None) -> Json:
    """Model estimate of one decode step at p on each GPU with a datasheet
    bandwidth: a floor, not a measurement (for a mixture of experts, only
    where every expert is routed to)."""
    nbytes = decode_bytes(p, s)
    rows = [{"gpu": g.name, "bandwidth_gbs": sorted(g.bandwidth_gbs, reverse=True),
             "seconds": [nbytes / (bw * 1e9) for bw in sorted(g.bandwidth_gbs, reverse=True)],
             "note": g.note}
            for g in gpus.TABLE.values() if g.bandwidth_gbs]
    return {"bytes_per_step": nbytes, "batch": p["batch"], "gpus": rows,
            "what": _("model estimate, not measured: memory-bound decode reads every layer's "
                      "and the lm head's weights (one embedding row per sequence) and the KV "
                      "cache filled so far once per step; step ≥ bytes ÷ the datasheet's peak "
                      "bandwidth, so real steps are slower (kernels reach a fraction of peak, "
                      "and small batches add launch overhead)"),
            "no_bandwidth": [g.name for g in gpus.TABLE.values() if not g.bandwidth_gbs],
            "experts": _experts_note((s or {}).get("experts"), p["batch"])}


def _experts_note(experts: Json | None, batch: int) -> str | None:
    """A MoE step reads only the experts its tokens are routed to."""
    if not experts:
        return None
    n, k = experts["experts"], experts.get("per_token")
    return ngettext("a mixture of {experts} experts ({k} per token): this reads every expert, "
                    "and a step of {n} sequence routes to at most {most} per layer, so it is no "
                    "floor below batch {floor}",
                    "a mixture of {experts} experts ({k} per token): this reads every expert, "
                    "and a step of {n} sequences routes to at most {most} per layer, so it is no "
                    "floor below batch {floor}", batch, experts=n, k=k or "?",
                    most=min(n, batch * k) if k else "?", floor=-(-n // k) if k else "?")
