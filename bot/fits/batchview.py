"""A batch or length sweep's fit as a message: the measured points, each
memory method's model with its checks, predictions with their intervals, the
largest batch for a GPU. Pure."""
from __future__ import annotations

from bot.blocks import table_text
from bot.fits import depth, depthview, ols, scaling, usable
from worker.spec import LIVE_TIME_NOTE
from worker.units import duration, size

LEVEL = 0.90  # prediction intervals shown in sweep messages


def fit_parts(sweep: int, jobs: list[dict], fit: dict) -> list[str]:
    """The fit as a list of paragraphs; one starting with `~` is a context line."""
    parts = [_sweep_head(sweep, jobs, fit)]
    parts.append(_points_table(fit))
    if fit.get("failed"):
        parts.append("*Failed, excluded from the fit:* " + "; ".join(
            f"{f['trial']} ({_params(f['params'])}): {f['error_class']}"
            + (f" — {f['message']}" if f.get("message") else "") for f in fit["failed"]))
    if fit.get("oom"):
        o = fit["oom"]
        parts.append(f"*Out of memory* is information too: largest OK batch "
                     f"{o['largest_ok_batch']}, smallest OOM batch {o['smallest_oom_batch']} "
                     f"(on the worker that ran them).")
    if fit.get("error"):
        parts.append(f":x: No fit: {fit['error']}.")
        return parts
    for method, model in fit["memory"].items():
        parts.append(_model_text(f"Peak memory — {method}", model, fit))
    if fit.get("time"):
        parts.append(_model_text("Time per request" if fit["workload"] in ("llm-infer", "hf-infer")
                                 else "Time of the run phase", fit["time"], fit))
    if fit.get("arithmetic"):
        parts.append(_arithmetic_text(fit))
    vars_, points = fit["variables"], fit["points"]
    if vars_.get("batch") and points:
        top = max(points, key=lambda p: (p["params"].get(vars_["batch"], 0), p["s"]))
        lengths = {k: top["params"][k] for k in vars_["length"] if k in top["params"]}
        for factor in (2, 4):
            q = {vars_["batch"]: factor * top["params"][vars_["batch"]], **lengths}
            parts.append("\n".join(_prediction_lines(fit, q, f" ({factor}× the largest batch)",
                                                      brief=True)))
    parts.append(_gpu_text(fit, sweep))
    for note in [*(fit.get("notes") or []), _partial_note(fit)]:
        if note:
            parts.append(f":warning: {note}")
    parts.append(f"~How: ordinary least squares per memory method (never mixed) and for time; "
                 f"the terms are chosen by what the sweep varied, a richer one only when "
                 f"leave-one-out error shows it. ± is a {LEVEL:.0%} prediction interval "
                 f"for a new trial from the residuals (Student t, dof = points − terms); dof 1 "
                 f"is a weak check: add points. A held-out error refits without the largest "
                 f"config and predicts it. Ask `/trial fit S{sweep} batch=N gpu=H100`.")
    return [p for p in parts if p]


def _sweep_head(sweep: int, jobs: list[dict], fit: dict) -> str:
    what = f"recipe {fit['recipe']}" if fit.get("recipe") else (fit.get("workload") or "?")
    ok = sum(1 for j in jobs if j["status"] == "done")
    failed = sum(1 for j in jobs if j["status"] == "failed")
    vars_ = fit.get("variables") or {}
    axes = []
    if vars_.get("batch"):
        axes.append(f"b = {vars_['batch']}")
    if vars_.get("length"):
        axes.append(f"s = {'+'.join(vars_['length'])}")
    return (f":chart_with_upwards_trend: *Sweep S{sweep}* — {what}, {jobs[0]['trial']}–"
            f"{jobs[-1]['trial']}: {ok} ok, {failed} failed"
            + (f"; {', '.join(axes)}" if axes else ""))


def _partial_note(fit: dict) -> str | None:
    """A batch sweep of a partial-depth preset fits the partial model."""
    part = depth.partial({"workload": fit.get("workload"), "params": fit.get("defaults") or {},
                          "trial": "this sweep"})
    return (f"{part}: these fits are the partial model's, not the full depth's; a depth "
            "sweep (`layers=1,2,4`) predicts the full depth" if part else None)


def _params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def _points_table(fit: dict) -> str:
    points = fit.get("points") or []
    if not points:
        return ""
    methods = [m for m in (fit.get("memory") or {})] or [
        m for m in ("process_used_peak", "peak_reserved", "peak_allocated", "host_rss_peak")
        if any(p["memory"].get(m) is not None for p in points)]
    keys = list(points[0]["params"])
    head = ["trial", *keys, *[_SHORT.get(m, m) for m in methods], "time"]
    rows = [head]
    for p in points:
        rows.append([p["trial"] or "?", *[str(p["params"].get(k)) for k in keys],
                     *[size(p["memory"].get(m)) for m in methods],
                     duration(p["seconds"]) + (" (retried)" if p.get("retried") else "")])
    table = table_text(rows)
    return f"*Measured points* (memory peaks; time = {_time_what(fit)}):\n```{table}```"


_SHORT = {"process_used_peak": "NVML proc", "peak_reserved": "reserved",
          "peak_allocated": "allocated", "host_rss_peak": "host RSS"}


def _time_what(fit: dict) -> str:
    t = fit.get("time") or {}
    per_request = fit.get("workload") in ("llm-infer", "hf-infer")
    return t.get("what") or ("mean latency per request" if per_request else "run phase seconds")


_TERM = {"1": "", "b": "·b", "s": "·s", "s^2": "·s²", "b*s": "·b·s", "b*s^2": "·b·s²"}

def _formula(model: dict) -> str:
    fmt = size if model["unit"] == "bytes" else duration
    out = []
    for i, (feature, c) in enumerate(zip(model["features"], model["coef"])):
        sign = ("−" if c < 0 else "") if i == 0 else (" − " if c < 0 else " + ")
        out.append(sign + fmt(abs(c)) + _TERM[feature])
    return "".join(out)


def _model_text(title: str, model: dict, fit: dict) -> str:
    if model.get("error"):
        return f"*{title}*: no fit — {model['error']}"
    fmt = size if model["unit"] == "bytes" else duration
    v = model.get("verdict") or {}
    lines = [f"*{title}* ({model['what']}):"]
    if v and not v["usable"]:
        lines.append(f":no_entry: *{usable.text(v)}*")
    lines.append(f"≈ {_formula(model)}  _(terms: {', '.join(model['features'])}; {model['why']}"
                 + ("; shown for the record, not to use" if v and not v["usable"] else "")
                 + ")_")
    check = []
    if model["residual_sd"] is not None:
        check.append(f"residual sd {fmt(model['residual_sd'])} on {model['dof']} dof")
    else:
        check.append(f"{model['n']} points, {len(model['features'])} terms: an exact line, no "
                     "residual to check it")
    held = model.get("held_out")
    if held:
        err = held["relative_error"]
        check.append(f"held out {held['trial']} (b={held['b']:g}, s={held['s']:g}): predicted "
                     f"{fmt(held['predicted'])}, measured {fmt(held['measured'])}, error "
                     + (f"{err:+.1%}" if err is not None else "n/a"))
    else:
        check.append(f"held-out error cannot be computed: {model['held_out_why']}")
    if model.get("loo"):
        check.append(f"leave-one-out max {model['loo']['max_relative']:.1%} over "
                     f"{model['loo']['count']} points")
    if model.get("missing"):
        check.append(f"{model['missing']} trial(s) had no {model['target']} figure")
    lines.append("; ".join(check))
    if v and usable.text(v) and v["usable"]:
        lines.append(f"_{usable.text(v)}_")
    marks = usable.marks_text(v, unmeasured_only=v["cause"] == "noise") if v else ""
    if marks:  # a noise verdict has named the marked points already
        lines.append(f"_{marks}_")
    if model["target"] in ("host_rss_peak", "host_rss_peak_kernel", "seconds"):
        lines.append(_allocator_line("time" if model["target"] == "seconds"
                                     else model["target"], fit))
    return "\n".join(line for line in lines if line)


def _allocator_line(target: str, fit: dict) -> str:
    """Which C allocator setting (and pass) the figure came from, and what that means."""
    used = (fit.get("allocators") or {}).get(target) or [
        f"malloc={fit['defaults'].get('malloc', 'glibc')}"]
    text = f"_Measured under {' and '.join(used)}"
    if target != "time" and any(u.startswith("malloc=glibc") for u in used):
        text += (": host RSS also counts memory the C allocator kept after frees (glibc keeps "
                 "freed blocks under its mmap threshold, at most 32 MiB each), so growth "
                 "measured at small batches can overstate large ones by 10–20%; sweep "
                 "with malloc=live, or on a CPU with the default malloc=auto, for the live "
                 "peak")
    elif target != "time":
        text += ": glibc's mmap threshold pinned, so host RSS is the live peak"
    elif any(u.startswith("malloc=live") for u in used):
        text += (f": on a CPU {LIVE_TIME_NOTE}; the default malloc=auto times a separate "
                 "glibc pass")
    return text + "._"


def _per_token_slope(model: dict, fit: dict) -> float | None:
    """Bytes per (sequence × position): the b·s coefficient, or b's over s."""
    coef = dict(zip(model["features"], model["coef"]))
    if "b*s" in coef:
        return coef["b*s"]
    if "b" in coef and set(coef) <= {"1", "b"}:
        s = model["range"]["s"][0]
        return coef["b"] / s if s else None
    return None


def _arithmetic_text(fit: dict) -> str:
    a, d = fit["arithmetic"], fit["defaults"]
    parts, layers = a["parts"], a.get("layers") or d["layers"]
    head = ("tied to the embedding" if a.get("tied_embedding") else
            f"{parts['lm_head']:,}, not tied")
    rest = "final norm" if fit.get("workload") == "llm-infer" else "outside the layers"
    lines = [f"*From the architecture* (exact, {a['dtype']} = {a['dtype_bytes']} B): weights "
             f"{a['weight_params']:,} params = {size(a['weight_bytes'])} (embedding "
             f"{parts['embedding']:,}, lm head {head}; "
             f"layers {layers} × {parts['layers'] // layers:,}; {rest} "
             f"{parts['final_norm']:,}); "
             f"KV cache {a['kv_formula']} = {size(a['kv_bytes_per_token'])} per token"]
    for method, model in fit["memory"].items():
        if model.get("error"):
            continue
        slope = _per_token_slope(model, fit)
        coef = dict(zip(model["features"], model["coef"]))
        bits = []
        if slope is not None and a["kv_bytes_per_token"]:
            ratio = slope / a["kv_bytes_per_token"]
            bits.append(f"fitted {size(slope)} per token = {ratio:.2f}× the KV cache's")
        if "1" in coef:
            bits.append(f"fixed term {size(coef['1'])} vs weights {size(a['weight_bytes'])}")
        if bits:
            lines.append(f"• {method}: " + "; ".join(bits))
    lines.append("_Above the KV cache per token: activations and workspace (prefill grows with "
                 "batch·prompt); above the weights: the runtime (host RSS: Python + torch "
                 "libraries, ~250 MB; GPU: the allocator's cache, the CUDA context)._")
    return "\n".join(lines)


def _prediction_lines(fit: dict, params: dict, why: str, brief: bool = False) -> list[str]:
    axes = [k for k in (fit["variables"]["batch"], *fit["variables"]["length"]) if k]
    merged = {**fit["defaults"], **params}
    shown = {**{k: merged[k] for k in axes if k in merged},
             **{k: v for k, v in params.items() if k not in axes}}
    lines = [f"*Predicted at {_params(shown)}*{why}:"]
    targets = [(m, lambda m=m: scaling.predict_memory(fit, m, params), size)
               for m in fit["memory"]]
    if fit.get("time"):
        targets.append(("time", lambda: scaling.predict_seconds(fit, params), duration))
    for name, predict, fmt in targets:
        try:
            value, se, dof = predict()
        except ValueError as exc:
            lines.append(f"• {name}: cannot say — {exc}")
            continue
        band = ols.interval(value, se, dof, LEVEL)
        spread = (f" ± {fmt((band[1] - band[0]) / 2)} ({LEVEL:.0%} PI, dof {dof})" if band
                  else " (no interval: 2 points, dof 0)")
        v = _verdict_at(fit, name, params, value)
        if not v["usable"]:
            said = (f"unusable, as its fit above ({v['cause']})" if brief and v["problem"]
                    == ((_model(fit, name).get("verdict") or {}).get("problem"))
                    else usable.text(v))
            lines.append(f"• {name}: *{said}* (the fit says {fmt(value)}{spread})")
            continue
        used = (fit.get("allocators") or {}).get(name)
        lines.append(f"• {name}: {fmt(value)}{spread}{_extrapolation(fit, name, params)}"
                     + (f" _(from {' and '.join(used)})_" if used else ""))
    return lines


def _model(fit: dict, name: str) -> dict:
    return fit["time"] if name == "time" else fit["memory"][name]


def _verdict_at(fit: dict, name: str, params: dict, value: float) -> dict:
    return usable.verdict(_model(fit, name), fit.get("points") or [],
                          (*scaling.point(fit, params), value), fit["variables"]["batch"])


def _extrapolation(fit: dict, name: str, params: dict) -> str:
    model = fit["time"] if name == "time" else fit["memory"].get(name)
    batch = fit["variables"]["batch"]
    if not model or model.get("error") or not batch or batch not in params:
        return ""
    top = model["range"]["b"][1]
    if params[batch] > top:
        return (f" — extrapolated {params[batch] / top:.3g}× past the largest measured batch "
                f"{top:g}")
    return ""


def _largest_line(ans: dict, fit: dict, lengths: dict) -> str:
    if not ans["ok"]:
        return f":warning: No answer: {ans['reason']}."
    at = _params({**{k: fit["defaults"][k] for k in fit["variables"]["length"]
                     if k in fit["defaults"]}, **lengths})
    text = (f"largest batch ≈ *{ans['batch']}*" + (f" at {at}" if at else "")
            + f": predicted {size(ans['predicted'])} ({ans['method']}), margin "
            f"{size(ans['margin_bytes'])} ({ans['margin_fraction']:.1%} of "
            f"{size(ans['gpu_bytes'])})")
    if ans.get("batch_upper") is not None:
        text += (f"; if the {ans['level']:.0%} upper bound must fit too: batch "
                 f"{ans['batch_upper']}")
    if ans.get("extrapolation", 1) > 1:
        text += f" — extrapolated {ans['extrapolation']:.3g}× past the largest measured batch"
        if ans["extrapolation"] > 4:
            text += "; measure near it before relying on it"
    if ans["batch"] > 4096:
        text += " (beyond llm-infer's batch limit of 4096)"
    if ans.get("caveat"):
        text += f". Note: {ans['caveat']}"
    return text + "."


def _gpu_text(fit: dict, sweep: int) -> str:
    method = scaling.gpu_method(fit)
    if method is None:
        if "host_rss_peak" in fit["memory"]:
            return (":warning: *No GPU answer from this sweep*: it measured host RSS on a CPU, "
                    "and CPU memory does not say what fits a GPU. Run the same sweep on a "
                    "CUDA worker (add `device=cuda`), then ask "
                    "`/trial fit S<new id> gpu=H100`.")
        return ""
    gpu = fit.get("measured_gpu")
    text = ""
    if gpu:
        ans = scaling.largest_batch(fit, gpu["memory"], level=LEVEL)
        text = (f"*On the measured GPU* ({gpu['name']}, {size(gpu['memory'])} total as the "
                f"worker reports it): " + _largest_line(ans, fit, {}) + "\n")
        oom = fit.get("oom")
        if ans["ok"] and oom and ans["batch"] >= oom["smallest_oom_batch"]:
            text += (f":warning: But batch {oom['smallest_oom_batch']} ran out of memory in this "
                     "sweep: the fit misses a term, or the OOM came from another worker. The "
                     "measured OOM wins.\n")
    return text + (f"For a named GPU: `/trial fit S{sweep} gpu=H100` (or `gpu=<size>GiB`).")


def answer_parts(sweep: int, jobs: list[dict], fit: dict, params: dict, gpu=None) -> list[str]:
    """`/trial fit S12 batch=32 prompt=2048 gpu=H100`: a prediction for one
    config and the largest batch for a GPU, each with how it was measured."""
    head = _sweep_head(sweep, jobs, fit)
    if fit.get("error"):
        return [f":x: {head}\nIt cannot be fitted: {fit['error']}."]
    if not params and gpu is None:
        return fit_parts(sweep, jobs, fit)
    lines = [head]
    if _partial_note(fit):
        lines.append(f":warning: {_partial_note(fit)}")
    vars_ = fit["variables"]
    if params:
        lines += _prediction_lines(fit, params, "")
    if gpu is not None:
        lengths = {k: v for k, v in params.items() if k != vars_["batch"]}
        lines.append(f"*Largest batch on {gpu.describe()}*")
        if gpu.note:
            lines.append(f"_{gpu.note}_")
        if (fit.get("defaults") or {}).get("dtype") == "bf16" and gpu.bf16 is False:
            lines.append(f":warning: {depthview.no_bf16(gpu.name)}")
        lines.append(_largest_line(scaling.largest_batch(fit, gpu.bytes, level=LEVEL,
                                                         **lengths), fit, lengths))
        if gpu.datasheet_gb is not None:
            lines.append("_The usable total of a real card differs (ECC, driver, firmware): "
                         "give `gpu=<size>GiB` from its nvidia-smi memory.total for an exact "
                         "answer._")
    return lines
