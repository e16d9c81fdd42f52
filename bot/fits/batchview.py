"""A batch or length sweep's fit as a message: the measured points, each
memory method's model with its checks, predictions with their intervals, the
largest batch for a GPU. Pure."""
from __future__ import annotations

from bot.blocks import table_text
from bot.fits import depth, depthview, scaling, usable
from worker.api import LIVE_TIME_NOTE, duration, size
from worker.i18n import _

LEVEL = 0.90  # prediction intervals shown in sweep messages


def fit_parts(sweep: int, jobs: list[dict], fit: dict) -> list[str]:
    """The fit as a list of paragraphs; one starting with `~` is a context line."""
    parts = [_sweep_head(sweep, jobs, fit)]
    parts.append(_points_table(fit))
    if fit.get("failed"):
        parts.append(_("*Failed, excluded from the fit:* {trials}", trials="; ".join(
            f"{f['trial']} ({_params(f['params'])}): {f['error_class']}"
            + (f" — {f['message']}" if f.get("message") else "") for f in fit["failed"])))
    if fit.get("oom"):
        o = fit["oom"]
        parts.append(_("*Out of memory* is information too: largest OK batch {ok}, smallest OOM "
                       "batch {oom} (on the worker that ran them).", ok=o["largest_ok_batch"],
                       oom=o["smallest_oom_batch"]))
    if fit.get("error"):
        parts.append(_(":x: No fit: {error}.", error=fit["error"]))
        return parts
    for method, model in fit["memory"].items():
        parts.append(_model_text(_("Peak memory — {method}", method=method), model, fit))
    if fit.get("time"):
        parts.append(_model_text(_("Time per request") if fit["workload"] in ("llm-infer",
                                                                              "hf-infer")
                                 else _("Time of the run phase"), fit["time"], fit))
    if fit.get("arithmetic"):
        parts.append(_arithmetic_text(fit))
    vars_, points = fit["variables"], fit["points"]
    if vars_.get("batch") and points:
        top = max(points, key=lambda p: (p["params"].get(vars_["batch"], 0), p["s"]))
        lengths = {k: top["params"][k] for k in vars_["length"] if k in top["params"]}
        for factor in (2, 4):
            q = {vars_["batch"]: factor * top["params"][vars_["batch"]], **lengths}
            why = _(" ({factor}× the largest batch)", factor=factor)
            parts.append("\n".join(_prediction_lines(fit, q, why, brief=True)))
    parts.append(_gpu_text(fit, sweep))
    for note in [*(fit.get("notes") or []), _partial_note(fit)]:
        if note:
            parts.append(f":warning: {note}")
    parts.append(_("~How: ordinary least squares per memory method (never mixed) and for time; "
                   "the terms are chosen by what the sweep varied, a richer one only when "
                   "leave-one-out error shows it. ± is a {level} prediction interval for a new "
                   "trial: the residuals' (Student t, dof = points − terms; dof 1 is a weak "
                   "check: add points) and, in quadrature, the form's own error from "
                   "leave-one-out (each config predicted from the others, its error read as a "
                   "curve the form lacks and grown with the distance as (u − u_lo)·(u − u_hi), "
                   "u = b·s), so it widens fast past the points; with too few configs to leave "
                   "one out there is none. "
                   "A held-out error refits without the largest config and predicts it. Ask "
                   "`/trial fit S{sweep} batch=N gpu=H100`.",
                   level=format(LEVEL, ".0%"), sweep=sweep))
    return [p for p in parts if p]


def _sweep_head(sweep: int, jobs: list[dict], fit: dict) -> str:
    what = (_("recipe {recipe}", recipe=fit["recipe"]) if fit.get("recipe")
            else (fit.get("workload") or "?"))
    ok = sum(1 for j in jobs if j["status"] == "done")
    failed = sum(1 for j in jobs if j["status"] == "failed")
    vars_ = fit.get("variables") or {}
    axes = []
    if vars_.get("batch"):
        axes.append(f"b = {vars_['batch']}")
    if vars_.get("length"):
        axes.append(f"s = {'+'.join(vars_['length'])}")
    values = dict(sweep=sweep, what=what, first=jobs[0]["trial"], last=jobs[-1]["trial"],
                  ok=ok, failed=failed)
    if axes:
        return _(":chart_with_upwards_trend: *Sweep S{sweep}* — {what}, {first}–{last}: {ok} ok, "
                 "{failed} failed; {axes}", axes=", ".join(axes), **values)
    return _(":chart_with_upwards_trend: *Sweep S{sweep}* — {what}, {first}–{last}: {ok} ok, "
             "{failed} failed", **values)


def _partial_note(fit: dict) -> str | None:
    """A batch sweep of a partial-depth preset fits the partial model."""
    part = depth.partial({"workload": fit.get("workload"), "params": fit.get("defaults") or {},
                          "trial": _("this sweep")})
    return (_("{part}: these fits are the partial model's, not the full depth's; a depth "
              "sweep (`layers=1,2,4`) predicts the full depth", part=part) if part else None)


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
    head = [_("trial"), *keys, *[_SHORT.get(m, m) for m in methods], _("time")]
    rows = [head]
    for p in points:
        rows.append([p["trial"] or "?", *[str(p["params"].get(k)) for k in keys],
                     *[size(p["memory"].get(m)) for m in methods],
                     duration(p["seconds"]) + (_(" (retried)") if p.get("retried") else "")])
    table = table_text(rows)
    return _("*Measured points* (memory peaks; time = {what}):\n```{table}```",
             what=_time_what(fit), table=table)


# memory methods' column names: their measuring tools' own terms, kept as they are
_SHORT = {"process_used_peak": "NVML proc", "peak_reserved": "reserved",
          "peak_allocated": "allocated", "host_rss_peak": "host RSS"}


def _time_what(fit: dict) -> str:
    t = fit.get("time") or {}
    per_request = fit.get("workload") in ("llm-infer", "hf-infer")
    return t.get("what") or (_("mean latency per request") if per_request
                             else _("run phase seconds"))


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
        return _("*{title}*: no fit — {error}", title=title, error=model["error"])
    fmt = size if model["unit"] == "bytes" else duration
    v = model.get("verdict") or {}
    lines = [_("*{title}* ({what}):", title=title, what=model["what"])]
    if v and not v["usable"]:
        lines.append(f":no_entry: *{usable.text(v)}*")
    terms = dict(formula=_formula(model), terms=", ".join(model["features"]), why=model["why"])
    lines.append(_("≈ {formula}  _(terms: {terms}; {why}; shown for the record, not to use)_",
                   **terms) if v and not v["usable"] else
                 _("≈ {formula}  _(terms: {terms}; {why})_", **terms))
    check = []
    if model["residual_sd"] is not None:
        check.append(_("residual sd {sd} on {dof} dof", sd=fmt(model["residual_sd"]),
                       dof=model["dof"]))
    else:
        check.append(_("{n} points, {terms} terms: an exact line, no residual to check it",
                       n=model["n"], terms=len(model["features"])))
    held = model.get("held_out")
    if held:
        err = held["relative_error"]
        check.append(_("held out {trial} (b={b}, s={s}): predicted {predicted}, measured "
                       "{measured}, error {error}", trial=held["trial"], b=format(held["b"], "g"),
                       s=format(held["s"], "g"), predicted=fmt(held["predicted"]),
                       measured=fmt(held["measured"]),
                       error=format(err, "+.1%") if err is not None else _("n/a")))
    else:
        check.append(_("held-out error cannot be computed: {why}", why=model["held_out_why"]))
    if model.get("loo"):
        check.append(_("leave-one-out max {max} over {count} points",
                       max=format(model["loo"]["max_relative"], ".1%"),
                       count=model["loo"]["count"]))
    if model.get("missing"):
        check.append(_("{n} trial(s) had no {target} figure", n=model["missing"],
                       target=model["target"]))
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
    under = _(" and ").join(used)
    if target != "time" and any(u.startswith("malloc=glibc") for u in used):
        return _("_Measured under {under}: host RSS also counts memory the C allocator kept "
                 "after frees (glibc keeps freed blocks under its mmap threshold, at most 32 MiB "
                 "each), so growth measured at small batches can overstate large ones by "
                 "10–20%; sweep with malloc=live, or on a CPU with the default malloc=auto, for "
                 "the live peak._", under=under)
    if target != "time":
        return _("_Measured under {under}: glibc's mmap threshold pinned, so host RSS is the "
                 "live peak._", under=under)
    if any(u.startswith("malloc=live") for u in used):
        return _("_Measured under {under}: on a CPU {note}; the default malloc=auto times a "
                 "separate glibc pass._", under=under, note=_(LIVE_TIME_NOTE))
    return _("_Measured under {under}._", under=under)


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
    head = (_("tied to the embedding") if a.get("tied_embedding") else
            _("{params}, not tied", params=format(parts["lm_head"], ",")))
    values = dict(dtype=a["dtype"], bytes=a["dtype_bytes"],
                  params=format(a["weight_params"], ","), size=size(a["weight_bytes"]),
                  embedding=format(parts["embedding"], ","), head=head,
                  layers=layers, per_layer=format(parts["layers"] // layers, ","),
                  rest=format(parts["final_norm"], ","), formula=a["kv_formula"],
                  kv=size(a["kv_bytes_per_token"]))
    lines = [_("*From the architecture* (exact, {dtype} = {bytes} B): weights {params} params = "
               "{size} (embedding {embedding}, lm head {head}; layers {layers} × {per_layer}; "
               "final norm {rest}); KV cache {formula} = {kv} per token", **values)
             if fit.get("workload") == "llm-infer" else
             _("*From the architecture* (exact, {dtype} = {bytes} B): weights {params} params = "
               "{size} (embedding {embedding}, lm head {head}; layers {layers} × {per_layer}; "
               "outside the layers {rest}); KV cache {formula} = {kv} per token", **values)]
    for method, model in fit["memory"].items():
        if model.get("error"):
            continue
        slope = _per_token_slope(model, fit)
        coef = dict(zip(model["features"], model["coef"]))
        bits = []
        if slope is not None and a["kv_bytes_per_token"]:
            ratio = slope / a["kv_bytes_per_token"]
            bits.append(_("fitted {size} per token = {ratio}× the KV cache's", size=size(slope),
                          ratio=format(ratio, ".2f")))
        if "1" in coef:
            bits.append(_("fixed term {fixed} vs weights {weights}", fixed=size(coef["1"]),
                          weights=size(a["weight_bytes"])))
        if bits:
            lines.append(f"• {method}: " + "; ".join(bits))
    lines.append(_("_Above the KV cache per token: activations and workspace (prefill grows with "
                   "batch·prompt); above the weights: the runtime (host RSS: Python + torch "
                   "libraries, ~250 MB; GPU: the allocator's cache, the CUDA context)._"))
    return "\n".join(lines)


def _prediction_lines(fit: dict, params: dict, why: str, brief: bool = False) -> list[str]:
    axes = [k for k in (fit["variables"]["batch"], *fit["variables"]["length"]) if k]
    merged = {**fit["defaults"], **params}
    shown = {**{k: merged[k] for k in axes if k in merged},
             **{k: v for k, v in params.items() if k not in axes}}
    lines = [_("*Predicted at {params}*{why}:", params=_params(shown), why=why)]
    names = [*fit["memory"], *(["time"] if fit.get("time") else [])]
    for name in names:
        fmt = duration if name == "time" else size
        try:
            band = scaling.band(fit, name, params, LEVEL)
        except ValueError as exc:
            lines.append(_("• {name}: cannot say — {why}", name=name, why=exc))
            continue
        value, spread = band.value, _spread(band, fmt)
        v = _verdict_at(fit, name, params, value)
        if not v["usable"]:
            said = (_("unusable, as its fit above ({cause})", cause=_(v["cause"]))
                    if brief and v["problem"]
                    == ((_model(fit, name).get("verdict") or {}).get("problem"))
                    else usable.text(v))
            lines.append(_("• {name}: *{said}* (the fit says {value}{spread})", name=name,
                           said=said, value=fmt(value), spread=spread))
            continue
        used = (fit.get("allocators") or {}).get(name)
        lines.append(f"• {name}: {fmt(value)}{spread}{_extrapolation(fit, name, params)}"
                     + (_(" _(from {used})_", used=_(" and ").join(used)) if used else ""))
    return lines


def _spread(band, fmt) -> str:
    """" ± 12 MiB (90% PI, dof 1: the points' spread ± 4 MiB and the form's
    leave-one-out error ± 11 MiB over 3 points, in quadrature)", or why there is
    no interval."""
    if band.half is None:
        return _(" (no interval: {why})", why=band.why)
    return _(" ± {half} ({level} PI, dof {dof}: the points' spread ± {noise} and the form's "
             "leave-one-out error ± {form} over {n} points, in quadrature)", half=fmt(band.half),
             level=format(LEVEL, ".0%"), dof=band.dof, noise=fmt(band.noise),
             form=fmt(band.form), n=band.points)


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
        return _(" — extrapolated {times}× past the largest measured batch {top}",
                 times=format(params[batch] / top, ".3g"), top=format(top, "g"))
    return ""


def _largest_line(ans: dict, fit: dict, lengths: dict) -> str:
    if not ans["ok"]:
        return _(":warning: No answer: {reason}.", reason=ans["reason"])
    at = _params({**{k: fit["defaults"][k] for k in fit["variables"]["length"]
                     if k in fit["defaults"]}, **lengths})
    values = dict(batch=ans["batch"], at=at, predicted=size(ans["predicted"]),
                  method=ans["method"], margin=size(ans["margin_bytes"]),
                  fraction=format(ans["margin_fraction"], ".1%"), total=size(ans["gpu_bytes"]))
    text = (_("largest batch ≈ *{batch}* at {at}: predicted {predicted} ({method}), margin "
              "{margin} ({fraction} of {total})", **values) if at else
            _("largest batch ≈ *{batch}*: predicted {predicted} ({method}), margin {margin} "
              "({fraction} of {total})", **values))
    # each clause below is its own message, appended: the line reads as a list of caveats
    if ans.get("batch_upper") is not None:
        text += _("; if the {level} upper bound must fit too: batch {batch}",
                  level=format(ans["level"], ".0%"), batch=ans["batch_upper"])
    if ans.get("extrapolation", 1) > 1:
        text += _(" — extrapolated {times}× past the largest measured batch",
                  times=format(ans["extrapolation"], ".3g"))
        if ans["extrapolation"] > 4:
            text += _("; measure near it before relying on it")
    if ans["batch"] > 4096:
        text += _(" (beyond llm-infer's batch limit of 4096)")
    if ans.get("caveat"):
        text += _(". Note: {caveat}", caveat=ans["caveat"])
    return text + "."


def _gpu_text(fit: dict, sweep: int) -> str:
    method = scaling.gpu_method(fit)
    if method is None:
        if "host_rss_peak" in fit["memory"]:
            return _(":warning: *No GPU answer from this sweep*: it measured host RSS on a CPU, "
                     "and CPU memory does not say what fits a GPU. Run the same sweep on a CUDA "
                     "worker (add `device=cuda`), then ask `/trial fit S<new id> gpu=H100`.")
        return ""
    gpu = fit.get("measured_gpu")
    text = ""
    if gpu:
        ans = scaling.largest_batch(fit, gpu["memory"], level=LEVEL)
        text = _("*On the measured GPU* ({name}, {total} total as the worker reports it): "
                 "{answer}", name=gpu["name"], total=size(gpu["memory"]),
                 answer=_largest_line(ans, fit, {})) + "\n"
        oom = fit.get("oom")
        if ans["ok"] and oom and ans["batch"] >= oom["smallest_oom_batch"]:
            text += _(":warning: But batch {batch} ran out of memory in this sweep: the fit "
                      "misses a term, or the OOM came from another worker. The measured OOM "
                      "wins.", batch=oom["smallest_oom_batch"]) + "\n"
    return text + _("For a named GPU: `/trial fit S{sweep} gpu=H100` (or `gpu=<size>GiB`).",
                    sweep=sweep)


def answer_parts(sweep: int, jobs: list[dict], fit: dict, params: dict, gpu=None) -> list[str]:
    """`/trial fit S12 batch=32 prompt=2048 gpu=H100`: a prediction for one
    config and the largest batch for a GPU, each with how it was measured."""
    head = _sweep_head(sweep, jobs, fit)
    if fit.get("error"):
        return [_(":x: {head}\nIt cannot be fitted: {error}.", head=head, error=fit["error"])]
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
        lines.append(_("*Largest batch on {gpu}*", gpu=gpu.describe()))
        if gpu.note:
            lines.append(f"_{_(gpu.note)}_")
        if (fit.get("defaults") or {}).get("dtype") == "bf16" and gpu.bf16 is False:
            lines.append(f":warning: {depthview.no_bf16(gpu.name)}")
        lines.append(_largest_line(scaling.largest_batch(fit, gpu.bytes, level=LEVEL,
                                                         **lengths), fit, lengths))
        if gpu.datasheet_gb is not None:
            lines.append(_("_The usable total of a real card differs (ECC, driver, firmware): "
                           "give `gpu=<size>GiB` from its nvidia-smi memory.total for an exact "
                           "answer._"))
    return lines
