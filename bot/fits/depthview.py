"""Partial-depth predictions (bot/fits/depth.py) as message text, and a depth
sweep's fit.

Pure. Measured figures, predictions and model estimates each say which they
are; the decode estimate sits in its own paragraph, never in a measured row.
"""
from __future__ import annotations

from bot.blocks import section, table_text
from bot.fits import depth, usable
from worker.units import duration, size

LEVEL = 0.90
_SHORT = {"process_used_peak": "NVML per-process", "peak_reserved": "peak reserved",
          "peak_allocated": "peak allocated", "host_rss_peak": "host RSS peak (sampled)",
          "host_rss_peak_kernel": "kernel max RSS"}


def trial_text(pred: dict) -> str:
    """The report's paragraph for a trial with `preset=`."""
    per = pred["per_layer"]
    deep, ran = pred["layers"], pred["trial_layers"]
    lines = [f"*{pred['preset']} at full depth ({deep} layers; this trial ran {ran})*"]
    for m, v in pred["memory"].items():
        if v["predicted"] is None:
            lines.append(f"• {_SHORT[m]}: measured {size(v['measured'])} at {ran} layers, "
                         "not extrapolated (CPU side: on the GPU the weights and KV cache are "
                         "in device memory)")
        elif ran < deep:
            lines.append(f"• {_SHORT[m]}: predicted *{size(v['predicted'])}* = measured "
                         f"{size(v['measured'])} + {deep - ran} × {size(per['total'])} "
                         f"per layer ({size(per['weights'])} weights + {size(per['kv'])} "
                         "KV cache, arithmetic)")
        else:
            lines.append(f"• {_SHORT[m]}: measured *{size(v['measured'])}*")
    key = "model" if pred.get("workload") == "hf-infer" else "preset"
    lines.append(f"_{pred['what']}. A depth sweep measures the per-layer part: "
                 f"`/trial sweep {pred.get('workload') or 'llm-infer'} {key}={pred['preset']} "
                 "layers=1,2,4 ...`_" if ran < deep else f"_{pred['what']}_")
    return "\n".join(lines)


def fits_text(fits: dict) -> str:
    rows = [["GPU", "memory", f"margin at batch {fits['batch']}", "largest batch"]]
    for g in fits["gpus"]:
        rows.append([g["gpu"], size(g["bytes"]),
                     size(g["margin"]) + ("" if g["fits"] else " (no bf16)" if g.get("no_dtype")
                                          else " (does not fit)"),
                     str(g["largest_batch"]) if g["largest_batch"] else "none"])
    fitting = [g["gpu"] for g in fits["gpus"] if g["fits"]]
    head = (f"*Fits on* {', '.join(fitting)}" if fitting else
            "*Fits on* no GPU in the table at this batch")
    unable = [g for g in fits["gpus"] if g.get("no_dtype")]
    dtype_note = (f"_{no_bf16(', '.join(g['gpu'] for g in unable))}_\n" if unable else "")
    return (f"{head} — peak {size(fits['peak'])} at batch {fits['batch']} "
            f"(weights {size(fits['weights'])}, KV cache {size(fits['kv_per_sequence'])} "
            f"per sequence, rest {size(fits['rest'])}):\n```{table_text(rows)}```\n"
            + dtype_note +
            f"_Basis: {fits['basis']}. Sizes are datasheet GB read as 10^9 B; a real card's "
            "usable total is a little different._")


def no_bf16(names: str) -> str:
    return (f"Not counted as fitting {names}: a bf16 model needs bf16 arithmetic, which Volta "
            "(V100) and Turing (T4) lack (their datasheets list FP16, no BF16); run dtype=fp16 "
            "or dtype=fp32 there.")


def decode_text(d: dict, layers: int, only: str | None = None) -> str:
    parts = []
    for g in d["gpus"]:
        if only and g["gpu"] != only:
            continue
        each = [f"{duration(s)} at {bw:,.0f} GB/s" for s, bw in zip(g["seconds"],
                                                                    g["bandwidth_gbs"])]
        parts.append(f"{g['gpu']} {' – '.join(each)}")
    if not parts:
        parts = [f"{only}: no datasheet bandwidth in the table, no estimate"]
    none = (f" No datasheet bandwidth for {', '.join(d['no_bandwidth'])}: no estimate."
            if d["no_bandwidth"] else "")
    moe = f" :warning: {d['experts']}." if d.get("experts") else ""
    return (f"*Decode step at {layers} layers, batch {d['batch']} — model estimate, not "
            f"measured*: {size(d['bytes_per_step'])} read per step; at peak bandwidth "
            f"{'; '.join(parts)}.{moe}\n_{d['what']}.{none}_")


def _trial_parts(pred: dict) -> list[str]:
    return [trial_text(pred), fits_text(pred["fits"]), decode_text(pred["decode"], pred["layers"])]


def trial_blocks(pred: dict) -> list[dict]:
    return [section(t) for t in _trial_parts(pred)]


def trial_plain(pred: dict) -> str:
    """The same paragraphs for the message's text (the console prints it)."""
    return "\n".join(_trial_parts(pred))


# --- depth sweeps ---------------------------------------------------------------

def _model_line(title: str, model: dict, per_layer_arith: float | None, fmt) -> str:
    if model.get("error"):
        return f"*{title}*: no fit — {model['error']}"
    fixed, per = model["coef"][model["features"].index("1")], depth.slope(model)
    v = model.get("verdict") or {}
    line = f"*{title}* = {fmt(fixed)} + {fmt(per)} × layers"
    if v and not v["usable"]:
        line = f"*{title}*: :no_entry: *{usable.text(v)}*; the fit, for the record: " + line[
            len(f"*{title}* = "):]
    if per_layer_arith:
        line += (f" (arithmetic per layer: {fmt(per_layer_arith)}; measured/arithmetic "
                 f"{per / per_layer_arith:.2f})")
    held = model.get("held_out")
    if held:
        line += (f"; held out {held['trial']} at {held['b']:g} layers: predicted "
                 f"{fmt(held['predicted'])}, measured {fmt(held['measured'])} "
                 f"({held['relative_error']:+.1%})")
    else:
        line += f"; no held-out check: {model['held_out_why']}"
    marks = usable.marks_text(v, unmeasured_only=v["cause"] == "noise") if v else ""
    if marks:  # a noise verdict has named the marked points already
        line += f" _({marks})_"
    return line


def sweep_parts(sweep: int, jobs: list[dict], fit: dict, layers: int | None = None,
                gpu=None) -> list[str]:
    ok = sum(1 for j in jobs if j["status"] == "done")
    failed = len(fit.get("failed") or [])
    what = (f"{'model' if fit.get('workload') == 'hf-infer' else 'preset'} {fit['preset']}"
            if fit.get("preset") else fit.get("workload") or "llm-infer")
    parts = [f":straight_ruler: *Depth sweep S{sweep}* — {what}, {jobs[0]['trial']}–"
             f"{jobs[-1]['trial']}: {ok} ok, {failed} failed; fixed + per-layer × layers"]
    pts = fit.get("points") or []
    if pts:
        methods = [m for m in depth.METHODS if any(p["memory"].get(m) is not None for p in pts)]
        rows = [["trial", "layers", *[_SHORT[m] for m in methods], "time/request"]]
        for p in sorted(pts, key=lambda p: p["layers"]):
            rows.append([p["trial"] or "?", str(p["layers"]),
                         *[size(p["memory"].get(m)) for m in methods], duration(p["seconds"])])
        parts.append(f"*Measured points*:\n```{table_text(rows)}```")
    if fit.get("failed"):
        parts.append("*Failed, excluded:* " + "; ".join(
            f"{f['trial']} (layers={f['layers']}): {f['error_class']}" for f in fit["failed"]))
    if fit.get("error"):
        parts.append(f":x: No fit: {fit['error']}.")
        return parts
    per = fit["per_layer"]
    for m, model in fit["memory"].items():
        parts.append(_model_line(f"Peak memory — {m}", model, per["total"], size))
    for key, title in (("time", "Time per request"), ("decode", "Decode step")):
        if fit.get(key):
            parts.append(_model_line(title, fit[key], None, duration))
    parts += _prediction_parts(fit, layers, gpu)
    used = fit.get("allocators") or {}
    if used.get("host_rss_peak") or used.get("time"):
        parts.append(f"_Host RSS measured under {' and '.join(used.get('host_rss_peak') or ['?'])}"
                     f"; time under {' and '.join(used.get('time') or ['?'])}._")
    for note in fit.get("notes") or []:
        parts.append(f":warning: {note}")
    parts.append(f"~How: ordinary least squares of each memory method and of time against "
                 f"layers (every other parameter held); the deepest trial is held out and "
                 f"predicted from the rest (needs 3 depths). Measured per-layer bytes against "
                 f"the arithmetic (one layer's weights + KV cache) show what else grows with "
                 f"depth. Ask `/trial fit S{sweep} layers=N gpu=H100`.")
    return parts


def _prediction_parts(fit: dict, layers: int | None, gpu=None) -> list[str]:
    """The fit's prediction at `layers`: memory and time, what fits, the decode step."""
    parts: list[str] = []
    try:
        pred = depth.from_sweep(fit, layers)
    except ValueError as exc:
        parts.append(f"_{exc}._")
        pred = None
    if pred:
        lines = [f"*Predicted at {pred['layers']} layers* (from the fit; ± {LEVEL:.0%} "
                 "prediction interval where the fit has residual degrees of freedom):"]
        for m, v in pred["memory"].items():
            lines.append(f"• {_SHORT[m]}: {size(v['value'])}" + _interval(v, size))
        if pred["time"]:
            lines.append(f"• time per request: {duration(pred['time']['value'])}"
                         + _interval(pred["time"], duration) + " (on the sweep's worker)")
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


def answer_parts(sweep: int, jobs: list[dict], fit: dict, layers: int | None,
                 gpu=None) -> list[str]:
    """`/trial fit S12 layers=40`: the answer to that question, not the whole
    sweep again (without layers=, the whole fit: it is the question then)."""
    if layers is None or fit.get("error"):
        return sweep_parts(sweep, jobs, fit, layers, gpu)
    what = (f"{'model' if fit.get('workload') == 'hf-infer' else 'preset'} {fit['preset']}"
            if fit.get("preset") else fit.get("workload") or "llm-infer")
    head = (f":straight_ruler: *Depth sweep S{sweep}* ({what}) at layers={layers}"
            + (f" on {gpu.name}" if gpu is not None else ""))
    return [head, *_prediction_parts(fit, layers, gpu),
            f"~The whole fit (measured points, per-layer slopes, the held-out check) is in the "
            f"message posted when S{sweep} ended, or `/trial fit S{sweep}`."]


def _interval(v: dict, fmt) -> str:
    if v.get("verdict") and not v["verdict"]["usable"]:
        return f" — *{usable.text(v['verdict'])}*"
    if not v.get("interval"):
        return " (no interval: 2 depths leave no residual to judge the fit)"
    lo, hi = v["interval"]
    return f" [{fmt(lo)} … {fmt(hi)}]"
