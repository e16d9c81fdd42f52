"""Partial-depth predictions (bot/fits/depth.py) as message text, and a depth
sweep's fit.

Pure. Measured figures, predictions and model estimates each say which they
are; the decode estimate sits in its own paragraph, never in a measured row.
"""
from __future__ import annotations

from collections.abc import Callable

from bot.blocks import section, table_text
from bot.fits import depth, usable
from bot.fits.gpus import Gpu
from bot.states import JobStatus, Json
from worker.api import duration, size
from worker.i18n import _

LEVEL = 0.90
# memory methods' names: their measuring tools' own terms, kept as they are
_SHORT = {"process_used_peak": "NVML per-process", "peak_reserved": "peak reserved",
          "peak_allocated": "peak allocated", "host_rss_peak": "host RSS peak",
          "host_rss_peak_kernel": "kernel max RSS"}


def trial_text(pred: Json) -> str:
    """The report's paragraph for a trial with `preset=`."""
    per = pred["per_layer"]
    deep, ran = pred["layers"], pred["trial_layers"]
    lines = [_("*{preset} at full depth ({deep} layers; this trial ran {ran})*",
               preset=pred["preset"], deep=deep, ran=ran)]
    for m, v in pred["memory"].items():
        if v["predicted"] is None:
            lines.append(_("• {method}: measured {measured} at {ran} layers, not extrapolated "
                           "(CPU side: on the GPU the weights and KV cache are in device "
                           "memory)", method=_SHORT[m], measured=size(v["measured"]), ran=ran))
        elif ran < deep:
            lines.append(_("• {method}: predicted *{predicted}* = measured {measured} + {more} × "
                           "{per} per layer ({weights} weights + {kv} KV cache, arithmetic)",
                           method=_SHORT[m], predicted=size(v["predicted"]),
                           measured=size(v["measured"]), more=deep - ran,
                           per=size(per["total"]), weights=size(per["weights"]),
                           kv=size(per["kv"])))
        else:
            lines.append(_("• {method}: measured *{measured}*", method=_SHORT[m],
                           measured=size(v["measured"])))
    key = "model" if pred.get("workload") == "hf-infer" else "preset"
    lines.append(_("_{what}. A depth sweep measures the per-layer part: `/trial sweep {workload} "
                   "{key}={preset} layers=1,2,4 ...`_", what=pred["what"],
                   workload=pred.get("workload") or "llm-infer", key=key,
                   preset=pred["preset"]) if ran < deep else f"_{pred['what']}_")
    return "\n".join(lines)


def fits_text(fits: Json) -> str:
    rows = [["GPU", _("memory"), _("margin at batch {batch}", batch=fits["batch"]),
             _("largest batch")]]
    for g in fits["gpus"]:
        rows.append([g["gpu"], size(g["bytes"]),
                     size(g["margin"]) + ("" if g["fits"] else _(" (no bf16)")
                                          if g.get("no_dtype") else _(" (does not fit)")),
                     str(g["largest_batch"]) if g["largest_batch"] else _("none")])
    fitting = [g["gpu"] for g in fits["gpus"] if g["fits"]]
    values = dict(peak=size(fits["peak"]), batch=fits["batch"], weights=size(fits["weights"]),
                  kv=size(fits["kv_per_sequence"]), rest=size(fits["rest"]))
    head = (_("*Fits on* {gpus} — peak {peak} at batch {batch} (weights {weights}, KV cache {kv} "
              "per sequence, rest {rest}):", gpus=", ".join(fitting), **values) if fitting else
            _("*Fits on* no GPU in the table at this batch — peak {peak} at batch {batch} "
              "(weights {weights}, KV cache {kv} per sequence, rest {rest}):", **values))
    unable = [g for g in fits["gpus"] if g.get("no_dtype")]
    dtype_note = (f"_{no_bf16(', '.join(g['gpu'] for g in unable))}_\n" if unable else "")
    return (f"{head}\n```{table_text(rows)}```\n" + dtype_note +
            _("_Basis: {basis}. Sizes are datasheet GB read as 10^9 B; a real card's usable "
              "total is a little different._", basis=fits["basis"]))


def no_bf16(names: str) -> str:
    return _("Not counted as fitting {names}: a bf16 model needs bf16 arithmetic, which Volta "
             "(V100) and Turing (T4) lack (their datasheets list FP16, no BF16); run dtype=fp16 "
             "or dtype=fp32 there.", names=names)


def decode_text(d: Json, layers: int, only: str | None = None) -> str:
    parts = []
    for g in d["gpus"]:
        if only and g["gpu"] != only:
            continue
        each = [_("{time} at {bandwidth} GB/s", time=duration(s), bandwidth=format(bw, ",.0f"))
                for s, bw in zip(g["seconds"], g["bandwidth_gbs"])]
        parts.append(f"{g['gpu']} {' – '.join(each)}")
    if not parts:
        parts = [_("{gpu}: no datasheet bandwidth in the table, no estimate", gpu=only)]
    none = (_(" No datasheet bandwidth for {gpus}: no estimate.",
              gpus=", ".join(d["no_bandwidth"])) if d["no_bandwidth"] else "")
    moe = f" :warning: {d['experts']}." if d.get("experts") else ""
    return (_("*Decode step at {layers} layers, batch {batch} — model estimate, not measured*: "
              "{bytes} read per step; at peak bandwidth {each}.", layers=layers,
              batch=d["batch"], bytes=size(d["bytes_per_step"]), each="; ".join(parts))
            + f"{moe}\n_{d['what']}.{none}_")


def _trial_parts(pred: Json) -> list[str]:
    return [trial_text(pred), fits_text(pred["fits"]), decode_text(pred["decode"], pred["layers"])]


def trial_blocks(pred: Json) -> list[Json]:
    return [section(t) for t in _trial_parts(pred)]


def trial_plain(pred: Json) -> str:
    """The same paragraphs for the message's text (the console prints it)."""
    return "\n".join(_trial_parts(pred))


# --- depth sweeps ---------------------------------------------------------------

def _model_line(title: str, model: Json, per_layer_arith: float | None,
                fmt: Callable[[float | None], str]) -> str:
    if model.get("error"):
        return _("*{title}*: no fit — {error}", title=title, error=model["error"])
    fixed, per = model["coef"][model["features"].index("1")], depth.slope(model)
    v = model.get("verdict") or {}
    line = _("*{title}* = {fixed} + {per} × layers", title=title, fixed=fmt(fixed), per=fmt(per))
    if v and not v["usable"]:
        line = _("*{title}*: :no_entry: *{verdict}*; the fit, for the record: {fixed} + {per} × "
                 "layers", title=title, verdict=usable.text(v), fixed=fmt(fixed), per=fmt(per))
    # the clauses below are each one message, appended in order
    if per_layer_arith:
        line += _(" (arithmetic per layer: {per}; measured/arithmetic {ratio})",
                  per=fmt(per_layer_arith), ratio=format(per / per_layer_arith, ".2f"))
    held = model.get("held_out")
    if held:
        line += _("; held out {trial} at {layers} layers: predicted {predicted}, measured "
                  "{measured} ({error})", trial=held["trial"], layers=format(held["b"], "g"),
                  predicted=fmt(held["predicted"]), measured=fmt(held["measured"]),
                  error=format(held["relative_error"], "+.1%"))
    else:
        line += _("; no held-out check: {why}", why=model["held_out_why"])
    marks = usable.marks_text(v, unmeasured_only=v["cause"] == "noise") if v else ""
    if marks:  # a noise verdict has named the marked points already
        line += f" _({marks})_"
    return line


def sweep_parts(sweep: int, jobs: list[Json], fit: Json, layers: int | None = None,
                gpu: Gpu | None = None) -> list[str]:
    ok = sum(1 for j in jobs if j["status"] == JobStatus.DONE)
    failed = len(fit.get("failed") or [])
    what = _what(fit)
    parts = [_(":straight_ruler: *Depth sweep S{sweep}* — {what}, {first}–{last}: {ok} ok, "
               "{failed} failed; fixed + per-layer × layers", sweep=sweep, what=what,
               first=jobs[0]["trial"], last=jobs[-1]["trial"], ok=ok, failed=failed)]
    pts = fit.get("points") or []
    if pts:
        methods = [m for m in depth.methods([p["memory"] for p in pts])
                   if any(p["memory"].get(m) is not None for p in pts)]
        rows = [[_("trial"), "layers", *[_SHORT[m] for m in methods], _("time/request")]]
        for p in sorted(pts, key=lambda p: p["layers"]):
            rows.append([p["trial"] or "?", str(p["layers"]),
                         *[size(p["memory"].get(m)) for m in methods], duration(p["seconds"])])
        parts.append(_("*Measured points*:\n```{table}```", table=table_text(rows)))
    if fit.get("failed"):
        parts.append(_("*Failed, excluded:* {trials}", trials="; ".join(
            f"{f['trial']} (layers={f['layers']}): {f['error_class']}" for f in fit["failed"])))
    if fit.get("error"):
        parts.append(_(":x: No fit: {error}.", error=fit["error"]))
        return parts
    per = fit["per_layer"]
    for m, model in fit["memory"].items():
        parts.append(_model_line(_("Peak memory — {method}", method=m), model, per["total"],
                                 size))
    for key, title in (("time", _("Time per request")), ("decode", _("Decode step"))):
        if fit.get(key):
            parts.append(_model_line(title, fit[key], None, duration))
    parts += _prediction_parts(fit, layers, gpu)
    used = fit.get("allocators") or {}
    if used.get("host_rss_peak") or used.get("time"):
        parts.append(_("_Host RSS measured under {rss}; time under {time}._",
                       rss=_(" and ").join(used.get("host_rss_peak") or ["?"]),
                       time=_(" and ").join(used.get("time") or ["?"])))
    for note in fit.get("notes") or []:
        parts.append(f":warning: {note}")
    parts.append(_("~How: ordinary least squares of each memory method and of time against "
                   "layers (every other parameter held); the deepest trial is held out and "
                   "predicted from the rest (needs 3 depths). Measured per-layer bytes against "
                   "the arithmetic (one layer's weights + KV cache) show what else grows with "
                   "depth. Ask `/trial fit S{sweep} layers=N gpu=H100`.", sweep=sweep))
    return parts


def _prediction_parts(fit: Json, layers: int | None, gpu: Gpu | None = None) -> list[str]:
    """The fit's prediction at `layers`: memory and time, what fits, the decode step."""
    parts: list[str] = []
    try:
        pred = depth.from_sweep(fit, layers)
    except ValueError as exc:
        parts.append(f"_{exc}._")
        pred = None
    if pred:
        lines = [_("*Predicted at {layers} layers* (from the fit; ± {level} prediction interval "
                   "where the fit has residual degrees of freedom):", layers=pred["layers"],
                   level=format(LEVEL, ".0%"))]
        for m, v in pred["memory"].items():
            lines.append(f"• {_SHORT[m]}: {size(v['value'])}" + _interval(v, size))
        if pred["time"]:
            lines.append(_("• time per request: {time}{interval} (on the sweep's worker)",
                           time=duration(pred["time"]["value"]),
                           interval=_interval(pred["time"], duration)))
        parts.append("\n".join(lines))
        fits = pred["fits"]
        if gpu is not None:
            fits = dict(fits, gpus=[g for g in fits["gpus"] if g["gpu"] == gpu.name]
                        or [depth.fit_row(fits, gpu)])
        if pred.get("fits_note"):
            parts.append(f":warning: {pred['fits_note']}.")
        parts.append(fits_text(fits))
        parts.append(decode_text(pred["decode_estimate"], pred["layers"],
                                 gpu.name if gpu is not None else None))
    return parts


def answer_parts(sweep: int, jobs: list[Json], fit: Json, layers: int | None,
                 gpu: Gpu | None = None) -> list[str]:
    """`/trial fit S12 layers=40`: the answer to that question, not the whole
    sweep again (without layers=, the whole fit: it is the question then)."""
    if layers is None or fit.get("error"):
        return sweep_parts(sweep, jobs, fit, layers, gpu)
    what = _what(fit)
    head = (_(":straight_ruler: *Depth sweep S{sweep}* ({what}) at layers={layers} on {gpu}",
              sweep=sweep, what=what, layers=layers, gpu=gpu.name) if gpu is not None else
            _(":straight_ruler: *Depth sweep S{sweep}* ({what}) at layers={layers}",
              sweep=sweep, what=what, layers=layers))
    return [head, *_prediction_parts(fit, layers, gpu),
            _("~The whole fit (measured points, per-layer slopes, the held-out check) is in the "
              "message posted when S{sweep} ended, or `/trial fit S{sweep}`.", sweep=sweep)]


def _what(fit: Json) -> str:
    """What a depth sweep is of: "preset llama-7b", "model gpt2", or the workload."""
    if not fit.get("preset"):
        return fit.get("workload") or "llm-infer"
    return (_("model {name}", name=fit["preset"]) if fit.get("workload") == "hf-infer"
            else _("preset {name}", name=fit["preset"]))


def _interval(v: Json, fmt: Callable[[float | None], str]) -> str:
    if v.get("verdict") and not v["verdict"]["usable"]:
        return f" — *{usable.text(v['verdict'])}*"
    if not v.get("interval"):
        return _(" (no interval: 2 depths leave no residual to judge the fit)")
    lo, hi = v["interval"]
    return f" [{fmt(lo)} … {fmt(hi)}]"
