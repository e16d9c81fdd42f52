"""Scaling fits from a sweep: peak memory and time against batch and length.

Pure: no Slack, no SQL, no clock. Input is the ok and failed trial reports of
one sweep (`trialbot.trial/1`); output is plain JSON-serialisable data.

The model (docs/design.md §3, "Scaling")
---------------------------------
Each point is a trial at batch `b` and length `s`:

* llm-infer: `b = batch`, `s = prompt + gen` (the KV cache is preallocated for
  prompt + gen positions, so it grows with both).
* a recipe: `b = batch` when the recipe has an int `batch` parameter, and `s`
  the one other int parameter the sweep varied (e.g. `seq`); `1` when absent.

Peak memory is fitted as `a + k·b·s` (weights + fixed overhead + per-token
terms; the KV cache is `2·layers·kv_heads·head_dim·s·b·bytes` for the built-in
decoder, and as transformers keeps it for an hf-* model: worker/kvcache.py), with features
chosen by what the sweep actually varies:

* only b varied — memory `1, b`; time `1, b`
* only s varied — memory `1, s` or `1, s, s²`; time the same
* b and s varied — memory `1, b·s`, `1, b, b·s` or `1, b·s, b·s²`;
  time `1, b, b·s`, `1, b·s` or `1, b, b·s, b·s²`

The first of each list is the default. A richer one replaces it only when the
data supports it: it needs at least `p + 2` distinct configs (`p` its number
of terms) and a leave-one-out relative RMS error below 0.8× the default's
(when the default's is above 0.0001%: below that the difference is rounding). So a `b·s²` term
(attention scores that grow with the square of the length) is used only when
lengths vary, there are enough points, and the points show it — PyTorch's SDPA
is often memory-efficient and has no such term.

Each memory *method* is fitted on its own, never mixed: `peak_allocated` and
`peak_reserved` (torch's CUDA allocator), `process_used_peak` (NVML, the
trial's processes, includes the CUDA context), `host_rss_peak` (the child
tree's RSS, the CPU side). Time is the mean per-request latency for llm-infer
(prefill + decode of the whole batch) and the `run` phase's seconds for a
recipe (which has no per-request samples).

Ordinary least squares with its checks (held out, leave-one-out) and
prediction intervals: bot/fits/ols.py. With 1 distinct config nothing is fitted.

API (the planner's entry points)
--------------------------------
`fit_sweep(reports: list[dict]) -> dict`
    JSON-serialisable: `workload`, `recipe`, `variables` (`batch`: param name
    or None; `length`: param names summed into `s`), `defaults` (params the
    same in every ok trial), `points`, `failed`, `oom`, `memory` (per method a
    model, below), `time` (a model or None), `arithmetic` (llm-infer: weight
    and KV-cache bytes), `workers`, `notes`, `allocators` (for host RSS and
    time, the malloc settings and passes the points came from), and `error` (None, or why nothing
    could be fitted). A model: `target`, `unit`, `what`, `features`, `coef`,
    `n`, `distinct`, `dof`, `residual_sd` (None when dof = 0), `cov_unscaled`
    ((X'X)⁻¹), `held_out` ({trial, b, s, predicted, measured, relative_error}
    or None), `held_out_why` (why there is none), `loo` ({max_relative,
    rms_relative, count} or None), `candidates`, `why`, and `verdict`
    (bot/fits/usable.py: whether it can be used, and if not why and what to
    run instead). Each point carries its report's `marks` (UNSTABLE, contended).
`band(fit, method or "time", params, level) -> ols.Band`
    The prediction with its interval: the residuals' t interval plus the fitted
    form's leave-one-out error (bot/fits/ols.py); `why` when there is none.
`predict_memory(fit, method, params) -> (bytes, se, dof)`
`predict_seconds(fit, params) -> (seconds per request, se, dof)`
    `params` are trial parameters (`{"batch": 32, "prompt": 2048}`); the rest
    come from the sweep's `defaults`. `se` is the standard error of a new
    observation (NaN when dof = 0). Raises ValueError when the fit cannot
    answer: no such method, a varied parameter missing, or a parameter the
    sweep held fixed (e.g. `hidden`, `dtype`) set to another value.
`largest_batch(fit, gpu_bytes, method=None, **params) -> dict`
    The largest integer batch whose predicted memory ≤ `gpu_bytes`, with the
    margin; only from a GPU memory method (refused from host RSS).
"""

from __future__ import annotations

import math

from bot.fits import ols, usable
from bot.fits.sweeparith import add_arithmetic
from bot.states import Json
from worker.api import arithmetic
from worker.i18n import N_, _

SCHEMA = "trialbot.scaling/1"

# Preference order for GPU questions: NVML per-process includes the CUDA context.
GPU_METHODS = ("process_used_peak", "peak_reserved", "peak_allocated")

METHODS = (*GPU_METHODS, "host_rss_peak")

# Both tables' texts are marked N_ and translated where a fit takes them: _(METHOD_WHAT[m]).
METHOD_WHAT = {
    "process_used_peak": N_("NVML per-process used, the trial's processes, sampled ~100 Hz "
                            "(includes the CUDA context)"),
    "peak_reserved": N_("torch CUDA allocator peak reserved (excludes the CUDA context)"),
    "peak_allocated": N_("torch CUDA allocator peak allocated, tensors only (excludes the "
                         "allocator's cache and the CUDA context)"),
    "host_rss_peak": N_("host RSS of the trial: the kernel's exact peak of a child that ran "
                        "alone, else the child process tree sampled ~100 Hz (CPU side)"),
}

GPU_CAVEAT = {
    "process_used_peak": "",
    "peak_reserved": N_("the CUDA context (~300 MB+) is not in the allocator's figure: leave "
                        "that much more free"),
    "peak_allocated": N_("the allocator's cache and the CUDA context (~300 MB+) are not in "
                         "peak allocated: leave room for both"),
}

# Parameters that change how a trial is measured, not what it holds in memory
# or how long one request takes: they may differ between a sweep and a question.
MEASUREMENT_PARAMS = {"repeats", "stability", "run_cap", "warmup", "seed", "timeout",
                      "on_oom", "attempts"}

LLM_LENGTH = ("prompt", "gen")

LENGTH_WORDS = ("seq", "len", "length", "prompt", "gen", "token", "context", "ctx")

DTYPE_BYTES = arithmetic.DTYPE_BYTES

def variables(workload: str, params_list: list[Json]) -> Json:
    """Which parameter is the batch and which make up the length `s`."""
    if workload in ("llm-infer", "hf-infer"):
        return {"batch": "batch", "length": list(LLM_LENGTH)}
    first = params_list[0] if params_list else {}
    ints = [k for k, v in first.items() if isinstance(v, int) and not isinstance(v, bool)
            and k not in MEASUREMENT_PARAMS]
    batch = "batch" if "batch" in ints else None
    varied = [k for k in ints if k != batch and len({p.get(k) for p in params_list}) > 1]
    if not varied:  # nothing but batch varied: a length-like parameter still names s
        varied = [k for k in ints if k != batch and any(w in k.lower() for w in LENGTH_WORDS)][:1]
    return {"batch": batch, "length": varied}

def _bs(vars_: Json, p: Json) -> tuple[int, int]:
    b = p[vars_["batch"]] if vars_["batch"] else 1
    s = sum(p[k] for k in vars_["length"]) if vars_["length"] else 1
    return b, s

def seconds_of(r: Json) -> tuple[float | None, str]:
    units = r.get("units") or {}
    if r.get("recipe") and units.get("kind") == "program":  # one run: the whole program
        return ((units.get("program") or {}).get("seconds") or None,
                _("seconds of the whole program, start to exit (one program run)"))
    lat = r.get("latency")
    if lat and lat.get("mean") is not None:
        if r.get("recipe"):  # the run units its probe timed
            unit = (r.get("units") or {}).get("unit") or _("run unit")
            return lat["mean"], _("mean latency per {unit} in the run phase", unit=unit)
        return lat["mean"], _("mean latency per request (prefill + decode of the whole batch)")
    run = [p["seconds"] for p in r.get("phases") or [] if p.get("name") == "run"]
    if run:
        return sum(run), _("seconds of the run phase (one run of the program)")
    return None, ""

def allocator_of(r: Json, figure: str) -> str:
    """The C allocator setting `figure` (a memory method, or "time") was
    measured under: a malloc=auto trial's pass (worker/launcher/passes.py), or
    the one run's malloc (a report from before malloc= existed ran glibc's)."""
    passes = r.get("passes") or []
    for p in passes:
        if figure in (p.get("supplied") or []):
            return _("malloc={malloc}, {name} pass", malloc=p.get("malloc"), name=p.get("pass"))
    if passes:  # everything a memory pass did not supply is the last pass's
        return _("malloc={malloc}, {name} pass", malloc=passes[-1].get("malloc"),
                 name=passes[-1].get("pass"))
    return f"malloc={(r.get('params') or {}).get('malloc', 'glibc')}"


def allocators(ok: list[Json]) -> Json:
    """Per host-memory figure and time: the allocator settings its points came from."""
    return {f: sorted({allocator_of(r, f) for r in ok})
            for f in ("host_rss_peak", "host_rss_peak_kernel", "time")}


def _oom_batches(r: Json, batch: str | None) -> list[int]:
    """Batches that ran out of memory in this report: the failed trial's own,
    and any try a halve-batch retry left behind."""
    if batch is None:
        return []
    out = []
    requested = r.get("requested") or r.get("params") or {}
    for a in r.get("attempts") or []:
        if a.get("error_class") == "oom":
            out.append({**requested, **(a.get("changed") or {})}.get(batch))
    if r["status"] == "failed" and (r.get("error") or {}).get("class") == "oom":
        out.append(r["params"].get(batch))
    return sorted({b for b in out if isinstance(b, int)})

def fit_sweep(reports: list[Json]) -> Json:
    """Fit every memory method and the time of one batch/length sweep's reports
    (see the module's doc; bot/fits/sweep.py sends a depth sweep to depth.py)."""
    reports = [r for r in reports if r]
    ok = [r for r in reports if r.get("status") == "ok"]
    out: Json = {"schema": SCHEMA, "workload": None, "recipe": None, "variables": None,
           "defaults": {}, "points": [], "failed": [], "oom": None, "memory": {}, "time": None,
           "arithmetic": None, "workers": [], "measured_gpu": None, "notes": [],
           "allocators": {}, "error": None}
    if not reports:
        out["error"] = "no trial reports"
        return out
    src = ok[0] if ok else reports[0]
    out["workload"], out["recipe"] = src["workload"], src.get("recipe")
    vars_ = variables(out["workload"], [r["params"] for r in (ok or reports)])
    out["variables"] = vars_
    out["failed"] += [_failure(vars_, r) for r in reports if r.get("status") != "ok"]
    _oom_summary(out, reports, ok, vars_)
    if not ok:
        out["error"] = _("no trial of the sweep succeeded: nothing to fit")
        return out
    out["error"] = _defaults(out, ok, vars_)
    if out["error"]:
        return out
    out["allocators"] = allocators(ok)
    out["points"] += [_fit_point(vars_, r) for r in ok]
    _machines(out, ok)
    bs_set = {(p["b"], p["s"]) for p in out["points"]}
    varied = _varied(bs_set)
    if varied is None:
        out["error"] = _("{n} distinct config succeeded: at least 2 configs of different "
                         "batch or length are needed to fit anything", n=len(bs_set))
        return out
    _fit_models(out, varied, seconds_of(ok[0])[1])
    add_arithmetic(out, ok[0])
    return out


def _failure(vars_: Json, r: Json) -> Json:
    """A failed trial as the fit lists it: its axis params and its last error line."""
    err = r.get("error") or {}
    last = (err.get("message") or "").strip().splitlines()
    return {"trial": r.get("trial"), "params": _axis_params(vars_, r),
            "error_class": err.get("class"), "message": last[-1][:300] if last else ""}


def _defaults(out: Json, ok: list[Json], vars_: Json) -> str | None:
    """Set the params every ok trial shares; the error when the trials differ
    in a param the fit does not model, else None."""
    keys = set(ok[0]["params"])
    out["defaults"] = {k: ok[0]["params"][k] for k in sorted(keys)
                       if all(r["params"].get(k) == ok[0]["params"][k] for r in ok)}
    modeled = {vars_["batch"], *vars_["length"]}
    other = sorted(k for k in keys if k not in out["defaults"] and k not in modeled
                   and k not in MEASUREMENT_PARAMS)
    if other:
        return _("the trials differ in {params}, which the fit does not model: a sweep "
                 "varies batch and length only", params=", ".join(other))
    return None


def _fit_point(vars_: Json, r: Json) -> Json:
    b, s = _bs(vars_, r["params"])
    mem = r.get("memory") or {}
    return {"trial": r.get("trial"), "worker": r.get("worker"),
            "params": _axis_params(vars_, r), "b": b, "s": s,
            "memory": {m: mem.get(m) for m in METHODS},
            "seconds": seconds_of(r)[0], "marks": usable.marks(r),
            "retried": bool(r.get("requested")) and any(
                r["requested"].get(k) != v for k, v in r["params"].items())}


def _machines(out: Json, ok: list[Json]) -> None:
    """The GPU the trials measured (when one), the workers, and a note when
    they ran on more than one."""
    gpus = {((r.get("env") or {}).get("gpu_name"), (r.get("env") or {}).get("gpu_memory"))
            for r in ok}
    if len(gpus) == 1:
        name, total = next(iter(gpus))
        if name and total:  # the worker's own GPU: its exact total memory
            out["measured_gpu"] = {"name": name, "memory": total}
    workers = sorted({(r.get("worker") or "?", device_of(r)) for r in ok})
    out["workers"] = [{"worker": w, "device": d} for w, d in workers]
    if len(workers) > 1:
        out["notes"].append(_("the trials ran on {n} different workers/devices ({workers}): "
                              "their times and memory are fitted together; rerun on one worker "
                              "for a clean fit", n=len(workers),
                              workers=", ".join(f"{w}: {d}" for w, d in workers)))


def _fit_models(out: Json, varied: str, time_what: str) -> None:
    """Fit each memory method the points measured, and the time, each with its verdict."""
    for m in METHODS:
        rows = [(p["b"], p["s"], p["memory"][m], p["trial"]) for p in out["points"]
                if p["memory"].get(m) is not None]
        if not rows:
            continue
        missing = len(out["points"]) - len(rows)
        model = ols.fit_target(rows, "memory", _varied({(r[0], r[1]) for r in rows}) or varied,
                               m, "bytes", _(METHOD_WHAT[m]))
        if missing:
            model["missing"] = missing
        out["memory"][m] = model
    time_rows = [(p["b"], p["s"], p["seconds"], p["trial"]) for p in out["points"]
                 if p["seconds"] is not None]
    if time_rows:
        out["time"] = ols.fit_target(time_rows, "time", varied, "seconds", "s", time_what)
    for model in [*out["memory"].values(), out["time"]]:
        if model:
            model["verdict"] = usable.verdict(model, out["points"], axis=out["variables"]["batch"])


def device_of(r: Json) -> str:
    e = r.get("env") or {}
    if e.get("gpu_count") and str(e.get("device", "")).startswith("cuda"):
        return f"{e.get('gpu_name')}"
    return str(e.get("device") or "?")

def _varied(bs_set: set[tuple[float, float]]) -> str | None:
    bs = {b for b, _s in bs_set}
    ss = {s for _b, s in bs_set}
    if len(bs) > 1 and len(ss) > 1:
        return "bs"
    if len(bs) > 1:
        return "b"
    if len(ss) > 1:
        return "s"
    return None

def _axis_params(vars_: Json, r: Json) -> Json:
    p = r.get("params") or {}
    return {k: p.get(k) for k in [vars_["batch"], *vars_["length"]] if k}

def _oom_summary(out: Json, reports: list[Json], ok: list[Json], vars_: Json) -> None:
    batch = vars_["batch"]
    ooms = sorted({b for r in reports for b in _oom_batches(r, batch)})
    if not ooms:
        return
    oks = [r["params"][batch] for r in ok if batch in r["params"]]
    out["oom"] = {"largest_ok_batch": max(oks) if oks else None,
                  "smallest_oom_batch": min(ooms), "oom_batches": ooms}

def _point(fit: Json, params: Json) -> tuple[int, int]:
    """(b, s) for a question's params, the sweep's defaults filling the rest."""
    if fit.get("error"):
        raise ValueError(fit["error"])
    vars_, defaults = fit["variables"], fit["defaults"]
    for k, v in params.items():
        if k in MEASUREMENT_PARAMS or k in (vars_["batch"], *vars_["length"]):
            continue
        if k in defaults and defaults[k] != v:
            raise ValueError(_("the sweep measured {k}={measured}; a prediction at {k}={v} is "
                               "outside what it can say — sweep at that value", k=k,
                               measured=defaults[k], v=v))
    merged = {**defaults, **params}
    missing = [k for k in [vars_["batch"], *vars_["length"]] if k and k not in merged]
    if missing:
        raise ValueError(_("the sweep varied {params}: give {words}", params=", ".join(missing),
                           words=" ".join(f"{k}=N" for k in missing)))
    return _bs(vars_, merged)

def swept(fit: Json) -> list[str]:
    """The parameters the sweep's points took more than one value of."""
    vars_ = fit.get("variables") or {}
    names = [k for k in [vars_.get("batch"), *(vars_.get("length") or [])] if k]
    return [k for k in names if len({p["params"].get(k) for p in fit.get("points") or []}) > 1]

def point(fit: Json, params: Json) -> tuple[int, int]:
    """(b, s) of a question (ValueError when the sweep cannot answer it)."""
    return _point(fit, params)

def predict_memory(fit: Json, method: str, params: Json) -> tuple[float, float, int]:
    """(predicted bytes, standard error of a new observation, dof) for `method`."""
    if fit.get("error"):
        raise ValueError(fit["error"])
    model = fit["memory"].get(method)
    if model is None or model.get("error"):
        raise ValueError(_("the sweep has no {method} fit: {error}", method=method,
                           error=model["error"]) if model else
                         _("the sweep has no {method} fit; it measured {methods}", method=method,
                           methods=", ".join(fit["memory"]) or _("no memory")))
    return ols.predict_model(model, *_point(fit, params))

def predict_seconds(fit: Json, params: Json) -> tuple[float, float, int]:
    """(predicted seconds per request, standard error of a new observation, dof).
    For a recipe, seconds of one run phase."""
    if fit.get("error"):
        raise ValueError(fit["error"])
    model = fit.get("time")
    if model is None or model.get("error"):
        raise ValueError(_("the sweep has no time fit: {error}", error=model["error"]) if model
                         else _("the sweep has no time fit"))
    return ols.predict_model(model, *_point(fit, params))

def band(fit: Json, name: str, params: Json, level: float = 0.90) -> ols.Band:
    """A memory method's (or, for "time", the time's) prediction at `params` with
    its interval: the residuals' spread and the form's leave-one-out error."""
    if name == "time":
        predict_seconds(fit, params)  # refused as a prediction is
        model = fit["time"]
    else:
        predict_memory(fit, name, params)
        model = fit["memory"][name]
    return ols.band(model, *_point(fit, params), level)

def gpu_method(fit: Json) -> str | None:
    """The memory method to answer GPU questions from, or None."""
    for m in GPU_METHODS:
        model = fit["memory"].get(m)
        if model and not model.get("error"):
            return m
    return None

def largest_batch(fit: Json, gpu_bytes: int, method: str | None = None, level: float = 0.90,
                  **params: int) -> Json:
    """The largest integer batch whose predicted peak memory ≤ `gpu_bytes`, at
    the given length params (the sweep's defaults otherwise). Only from a GPU
    memory method: a host-RSS sweep is refused with what to run instead."""
    vars_ = fit.get("variables") or {}
    out: Json = {"ok": False, "gpu_bytes": gpu_bytes, "method": None, "batch": None,
           "predicted": None, "margin_bytes": None, "margin_fraction": None,
           "batch_upper": None, "level": level, "caveat": None, "reason": None}
    method = None if fit.get("error") else method or gpu_method(fit)
    out["reason"] = _method_refusal(fit, method)
    if out["reason"] or method is None:  # no method: refused above
        return out
    model = fit["memory"][method]
    caveat = GPU_CAVEAT[method]
    out["method"], out["caveat"] = method, _(caveat) if caveat else None
    if not vars_.get("batch") or not any("b" in f for f in model["features"]):
        out["reason"] = _("the sweep did not vary batch, so the fit says nothing about it")
        return out
    try:
        s = _point(fit, {vars_["batch"]: 1, **params})[1]
        c0 = ols.predict_model(model, 0, s)[0]
        c1 = ols.predict_model(model, 1, s)[0] - c0
    except ValueError as exc:
        out["reason"] = str(exc)
        return out
    out["per_sequence"], out["fixed"] = c1, c0
    if c1 <= 0:
        out["reason"] = _("the fit shows no memory growth with batch, so it cannot bound the "
                          "batch; check the sweep's points")
        return out
    b = math.floor((gpu_bytes - c0) / c1)
    if b < 1:
        out["reason"] = _("even batch 1 is predicted at {need} bytes, over the {have} bytes "
                          "available", need=format(c0 + c1, ".4g"), have=format(gpu_bytes, ".4g"))
        out["predicted"] = c0 + c1
        return out
    pred = c0 + c1 * b
    out.update(ok=True, batch=b, predicted=pred, margin_bytes=gpu_bytes - pred,
               margin_fraction=(gpu_bytes - pred) / gpu_bytes,
               extrapolation=b / model["range"]["b"][1])
    if ols.band(model, b, s, level).high is not None:
        out["batch_upper"] = _upper_batch(model, b, s, level, gpu_bytes)
    return out


def _method_refusal(fit: Json, method: str | None) -> str | None:
    """Why `method`'s fit cannot say what batch fits a GPU, or None when it can."""
    error: str | None = fit.get("error")
    if error:
        return error
    if method is None or method not in fit["memory"]:
        if "host_rss_peak" in fit["memory"]:
            return _("this sweep measured host RSS only (a CPU run): CPU memory does "
                     "not say what fits a GPU — weights, activations and the KV cache "
                     "live in device memory there, with the CUDA context and the "
                     "allocator's cache on top. Run the sweep on a CUDA worker "
                     "(`device=cuda`) and ask again")
        return _("the sweep has no GPU memory figures")
    if method == "host_rss_peak":
        return _("host RSS is CPU memory: it cannot answer what fits a GPU")
    model = fit["memory"][method]
    error = model.get("error")
    if error:
        return error
    if not (model.get("verdict") or {}).get("usable", True):
        return _("the {method} fit is {verdict}", method=method,
                 verdict=usable.text(model["verdict"]))
    return None


def _upper_batch(model: Json, b: int, s: int, level: float, gpu_bytes: int) -> int:
    """The conservative answer: the largest batch up to `b` whose upper bound
    (the form's error included) still fits."""
    def upper(n: int) -> float:
        high = ols.band(model, n, s, level).high
        assert high is not None  # as at `b`, which the caller checked: n changes no dof
        return high
    lo, hi = 0, b
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if upper(mid) <= gpu_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
