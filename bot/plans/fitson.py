"""Fits on at the plan's inputs: the `inputs` checklist item read as prompt,
gen and batch, and each block's "fits on" answer there, beside the one at its
trial's own shape (docs/plans-and-advice.md, "Fits on at the plan's inputs").
Pure: no Slack, no SQL, no clock.

Every figure comes from a measurement or the model's arithmetic, and says
which. A trial's answer is carried to the plan's inputs only where something
measured carries it:
* another batch at the trial's lengths: the batch rule of bot/fits/depth.py
  (the measured rest kept whole below the trial's batch, grown above it), the
  rule its largest batch already rests on;
* another length: a batch/length sweep's fit over that length (bot/fits/scaling.py),
  when the block rests on one and the fit is usable there.
A trial measured at another length is not carried: the rest (activations,
logits, workspace) grows with the prompt in a way one trial does not show.
Then the answer is the arithmetic's floor (weights + KV cache) and the trial
that would measure it; a CPU trial's answer is that floor at any shape.
"""
from __future__ import annotations

import re

from bot.fits import depth, gpus, scaling, usable
from bot.fits.sweep import fit_sweep
from bot.plans import footing, measured
from bot.states import Json
from worker.api import arithmetic, size
from worker.i18n import _

WORDS = ("prompt", "gen", "batch")  # the inputs a fits-on answer depends on
EXAMPLE = {"prompt": 4096, "gen": 256, "batch": 8}
LEVEL = 0.90
_FIGURE = re.compile(r"\b(prompt|gen|batch)\b\s*[=:]?\s*([^\s,;]+)", re.IGNORECASE)


def read_inputs(text: str | None) -> Json:
    """{"given": {prompt, gen, batch: int} as the text names them, "problem":
    why it cannot be read, or None}; an empty item gives nothing and no problem."""
    out: Json = {"given": {}, "problem": None, "text": text}
    if not text:
        return out
    found: dict[str, list[str]] = {}
    for word, value in _FIGURE.findall(text):
        found.setdefault(word.lower(), []).append(value)
    example = '`inputs="batch 8, prompt 4096, gen 256"`'
    if not found:
        out["problem"] = _("`inputs={text}` names no prompt, gen or batch figure that can be "
                           "read; write them as whole numbers, e.g. {example}", text=text,
                           example=example)
        return out
    for word, values in found.items():
        if not all(v.isdigit() and int(v) >= 1 for v in values):
            bad = next(v for v in values if not (v.isdigit() and int(v) >= 1))
            out["problem"] = _("`inputs={text}`: `{word} {value}` is not a whole number of "
                               "at least 1; write it in tokens or sequences, e.g. `{word} "
                               "{good}`", text=text, word=word, value=bad, good=EXAMPLE[word])
            return out
        if len({int(v) for v in values}) > 1:
            out["problem"] = _("`inputs={text}` gives {word} more than once ({values}); give "
                               "it once, e.g. {example}", text=text, word=word,
                               values=", ".join(values), example=example)
            return out
        out["given"][word] = int(values[0])
    return out


def shape_text(shape: Json) -> str:
    return " ".join(f"{k}={shape[k]}" for k in WORDS if k in shape)


def _gpus_text(rows: list[Json]) -> str:
    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        return _("fits on no GPU in the table")
    named = []
    for r in fitting:  # each its own call, so the catalog finds the message
        named.append(_("{gpu} (largest batch {batch})", gpu=r["gpu"], batch=r["largest_batch"])
                     if r.get("largest_batch") else r["gpu"])
    return _("fits on {gpus}", gpus=", ".join(named))


# --- a block resting on a trial or a depth sweep ---------------------------------

def _depth_source(block: Json, trials: list[Json]) -> Json | None:
    """The fits-on answer at the block's own shape, from its trial or its depth
    sweep, with what the plan's shape is carried by; None where no fits-on
    answer exists today (a recipe, training, llm-infer without a preset)."""
    if block.get("sweep"):
        fit = fit_sweep([t["report"] for t in trials])
        if fit.get("kind") != "depth" or fit.get("error"):
            return None
        try:
            pred = depth.from_sweep(fit, (block.get("predict") or {}).get("layers"))
        except ValueError:
            return None
        p = {**fit["defaults"], "layers": pred["layers"]}
        s = fit["sizing"] if fit.get("preset") else None
        deepest = max(pt["layers"] for pt in fit["points"])  # a trial there carries depth
        return {"source": f"S{block['sweep']}", "fits": pred["fits"], "full": p, "sizing": s,
                "config": {"workload": fit["workload"], **p, "layers": deepest}}
    r = dict(trials[0]["report"], trial=trials[0]["trial"])
    one = depth.from_trial(r)
    if one is None:
        return None
    s = depth.sizing_of(r)
    p = {**(depth.full_params(r["params"]) or r["params"]), "layers": one["layers"]}
    return {"source": trials[0]["trial"], "fits": one["fits"], "full": p, "sizing": s,
            "config": measured.config(r), "env": r.get("env") or {}}


def _basis(src: Json) -> str:
    f = src["fits"]
    if f["method"] is None:
        return _("by arithmetic alone: weights + KV cache, {peak} at batch {batch}, a lower "
                 "bound ({source} measured no GPU memory), so a GPU listed may not fit",
                 peak=size(f["peak"]), batch=f["batch"], source=src["source"])
    return _("from {source}'s {method} at full depth ({layers} layers): {peak} at batch "
             "{batch}", source=src["source"], method=f["method"], layers=src["full"]["layers"],
             peak=size(f["peak"]), batch=f["batch"])


def _rows_at_batch(f: Json, batch: int) -> list[Json]:
    """Each GPU at another batch by the batch rule the largest batch rests on."""
    if batch == f["batch"]:
        return list(f["gpus"])
    return sorted((depth.fit_row(dict(f, peak=_peak_at(f, batch)), g)
                   for g in gpus.TABLE.values()), key=lambda r: r["bytes"])


def _peak_at(f: Json, batch: int) -> float:
    peak: float = (f["weights"] + batch * f["kv_per_sequence"]
                   + f["rest"] * max(1, batch / f["batch"]))
    return peak


def _carried(plan: Json, block: Json, src: Json, own: Json, at: Json) -> str:
    """The answer at the plan's shape `at` from a trial (or depth sweep) at `own`."""
    f = src["fits"]
    same_lengths = all(at[k] == own[k] for k in ("prompt", "gen"))
    if same_lengths and f["method"] is not None:  # only the batch differs
        return "{}; {}".format(_gpus_text(_rows_at_batch(f, at["batch"])), _(
            "{basis}; batch {batch} needs {peak} by the batch rule (the measured rest kept whole "
            "below batch {own}, grown in proportion above it)", basis=_basis(src),
            batch=at["batch"], peak=size(_peak_at(f, at["batch"])), own=own["batch"]))
    floor = depth.fits_on({**src["full"], **at}, {}, s=src["sizing"])
    if f["method"] is None:  # the arithmetic carries itself: the same floor, at `at`
        return f"{_gpus_text(floor['gpus'])}; {_basis(src)}"
    return _not_carried(plan, block, src, floor, _(
        "no measured fit carries {source} from {own} to {at}: the rest (activations, logits, "
        "workspace) was measured at {own} only", source=src["source"], own=shape_text(own),
        at=shape_text(at)), at)


def _not_carried(plan: Json, block: Json, src: Json, floor: Json | None, why: str,
                 at: Json) -> str:
    """What is known without a measurement (the arithmetic's floor: a GPU below
    it cannot fit), and the trial that would measure the rest."""
    short = [g["gpu"] for g in (floor or {}).get("gpus", []) if g["margin"] < 0]
    need = size((floor or {}).get("peak"))
    if floor is None:
        known = _("the model's sizing is not known here, so not even the weights are counted")
    elif len(short) == len(floor["gpus"]):
        known = _("by arithmetic the weights and KV cache alone need {need} there, more than "
                  "any GPU in the table holds", need=need)
    elif short:
        known = _("by arithmetic the weights and KV cache alone need {need} there, more than "
                  "{gpus} hold; whether the others fit is not measured", need=need,
                  gpus=", ".join(short))
    else:
        known = _("by arithmetic the weights and KV cache alone need {need} there; whether a "
                  "GPU fits is not measured", need=need)
    target = plan["facts"].get("gpu") or ""
    if target.lower() in ("", "cpu", "none"):
        got = gpus.identify((src.get("env") or {}).get("gpu_name"))
        target = got.name if got else "none"
    words = footing.trial_words({**src["config"], **at}, target)
    return _("*not measured*: {why}; {known}. A trial at these inputs measures it: `{words}` "
             "(its report gives fits on there; `/plan {plan} block {kind} … trial=T..` with "
             "it)", why=why, known=known, words=words, plan=plan["name"], kind=block["kind"])


# --- a block resting on a batch/length sweep ------------------------------------

def _sweep_rows(fit: Json, shape: Json) -> tuple[list[Json] | None, str]:
    """(each GPU at `shape` from the sweep's GPU memory fit, its basis), or
    (None, why the fit cannot say)."""
    method = scaling.gpu_method(fit)
    if method is None:
        return None, _("the sweep measured no GPU memory it can fit")
    params = {k: shape[k] for k in WORDS}
    try:
        band = scaling.band(fit, method, params, LEVEL)
        at = scaling.point(fit, params)
    except ValueError as exc:
        return None, str(exc)
    model = fit["memory"][method]
    v = usable.verdict(model, fit.get("points") or [], (*at, band.value),
                       fit["variables"]["batch"])
    if not v["usable"]:
        return None, _("its {method} fit is {verdict}", method=method, verdict=usable.text(v))
    peak = band.high if band.high is not None else band.value
    bf16 = fit["defaults"].get("dtype") == "bf16"
    lengths = {k: shape[k] for k in ("prompt", "gen")}
    rows, why = [], None
    for g in sorted(gpus.TABLE.values(), key=lambda g: g.bytes):
        lb = scaling.largest_batch(fit, g.bytes, method, LEVEL, **lengths)
        why = why or (None if lb["ok"] or lb["predicted"] else lb["reason"])
        best = lb["batch_upper"] if lb.get("batch_upper") is not None else lb["batch"]
        rows.append({"gpu": g.name, "bytes": g.bytes, "fits": peak <= g.bytes and not (
            bf16 and g.bf16 is False), "largest_batch": best if lb["ok"] else None})
    figure = (_("the upper end of its {level} prediction interval", level=f"{LEVEL:.0%}")
              if band.high is not None else _("a point figure, no interval"))
    basis = _("from the sweep's {method} fit at {shape}: {peak}, {figure}", method=method,
              shape=shape_text(shape), peak=size(peak), figure=figure)
    return rows, basis + (_("; no largest batch: {why}", why=why) if why else "")


def _from_sweep(plan: Json, block: Json, trials: list[Json], inputs: Json) -> list[str] | None:
    """A batch/length sweep's block: at its own config and at the plan's, each
    from the sweep's fit; None for a sweep with no fits-on answer (a recipe's)."""
    fit = fit_sweep([t["report"] for t in trials])
    if fit.get("kind") == "depth" or fit.get("error") or fit["workload"] not in depth.INFER:
        return None
    own = {k: v for k, v in {**fit["defaults"], **block["predict"]}.items() if k in WORDS}
    at = {**own, **inputs["given"]}
    source = f"S{block['sweep']}"
    part = depth.partial({"workload": fit["workload"], "params": fit["defaults"],
                          "trial": source})
    lines = []
    for shape in ([at] if at == own or not inputs["given"] else [at, own]):
        rows, basis = _sweep_rows(fit, shape)
        if part:  # the fit is of fewer layers than the model has
            rows, basis = None, _("{part}: the sweep's fit is the partial model's, and no "
                                  "measured fit carries it to the full depth",
                                  part=part)
        if rows is not None:
            answer = f"{_gpus_text(rows)}; {basis}"
        else:
            sizing = depth.sizing_of(trials[0]["report"]) or (
                arithmetic.decoder_sizing(fit["defaults"]) if fit["workload"] == "llm-infer"
                else None)
            floor = (depth.fits_on({**fit["defaults"], **shape, "layers": sizing["layers"]}, {},
                                   s=sizing) if sizing else None)
            src = {"source": source, "config": measured.config(
                       {"workload": fit["workload"], "params": fit["defaults"]}),
                   "env": trials[0]["report"].get("env") or {}}
            answer = _not_carried(plan, block, src, floor, basis, shape)
        lines.append((shape, answer))
    return _block_lines(block, source, own, at, inputs, lines)


# --- the section in `/plan show` ------------------------------------------------

def _from_depth(plan: Json, block: Json, trials: list[Json], inputs: Json) -> list[str] | None:
    src = _depth_source(block, trials)
    if src is None:
        return None
    f = src["fits"]
    own = {k: src["full"][k] for k in WORDS}
    at = {**own, **inputs["given"]}
    answers = [(own, f"{_gpus_text(f['gpus'])}; {_basis(src)}")]
    if inputs["given"] and at != own:
        answers.insert(0, (at, _carried(plan, block, src, own, at)))
    return _block_lines(block, src["source"], own, at, inputs, answers)


def _block_lines(block: Json, source: str, own: Json, at: Json, inputs: Json,
                 answers: list[tuple[Json, str]]) -> list[str]:
    """A block's lines: at the plan's inputs first, then at its own shape."""
    kind = block["kind"]
    if not inputs["given"]:
        return [_("• {kind} at {source}'s own shape ({shape}): {answer}", kind=kind,
                  source=source, shape=shape_text(own), answer=answers[-1][1])]
    if at == own:
        return [_("• {kind} at the plan's inputs, which are {source}'s own shape ({shape}): "
                  "{answer}", kind=kind, source=source, shape=shape_text(at),
                  answer=answers[0][1])]
    taken = [k for k in WORDS if k not in inputs["given"]]
    shown = (_("{shape}; {words} as {source} ran, the inputs name none",
               shape=shape_text(at), words=", ".join(taken), source=source)
             if taken else shape_text(at))
    return [_("• {kind} at the plan's inputs ({shape}): {answer}", kind=kind, shape=shown,
              answer=answers[0][1]),
            _("  at {source}'s own shape ({shape}): {answer}", source=source,
              shape=shape_text(own), answer=answers[1][1])]


def section(plan: Json, ests: list[tuple[Json, Json, list[Json]]]) -> str:
    """`/plan show`'s *Fits on* paragraph: each block that has a fits-on answer
    (a trial or sweep of llm-infer with a preset, or hf-infer), at the plan's
    inputs and at its own shape; "" when no block has one."""
    inputs = read_inputs(plan["facts"].get("inputs"))
    if inputs["problem"]:
        inputs = {**inputs, "given": {}}
    lines: list[str] = []
    for block, _est, trials in ests:
        if not trials:
            continue
        got = (_from_sweep(plan, block, trials, inputs) if block.get("sweep") else None) \
            or _from_depth(plan, block, trials, inputs)
        lines += got or []
    if not lines:
        return ""
    head = _("*Fits on*, peak memory at full depth against each GPU of the datasheet table "
             "(the trial's report and `/trial fit` give the whole table):")
    if inputs["problem"]:
        lines.append(_("_The plan's inputs cannot be read, so these are at each block's own "
                       "shape: {problem}._", problem=inputs["problem"]))
    elif not inputs["given"]:
        lines.append(_("_The plan sets no inputs, so these are at each block's own shape; "
                       "`/plan {plan} set inputs=\"batch 8, prompt 4096, gen 256\"` evaluates "
                       "them at the plan's._", plan=plan["name"]))
    return "\n".join([head, *lines])
