"""The optimization ladder (docs/design.md §5): precision → activation checkpointing →
ZeRO-1, each step on top of the previous, measured as trials and judged by the
loss after the same steps from the same seed. A step is adopted only for a gain
beyond the noise: time by the stated test of bot/fits/compare.py, memory beyond
MEMORY_NOISE. Pure: specs in, table and recommendation out."""
from __future__ import annotations

from bot.blocks import chunks, reply, section, table_text
from bot.fits import compare, gpus
from bot.states import Json, Outcome
from bot.trials.ladderfit import AND, counts, joined, per_sequence, redefine
from worker.api import specs, units
from worker.i18n import N_, _, ngettext

STEPS = ("baseline", "precision", "checkpointing", "zero-1")
QUALITY_TOLERANCE = 0.01  # relative to the fp32 baseline's final loss
# A peak memory change counts only beyond this share of the previous step's peak.
# The allocator's peak repeats to within a few KiB for one config and seed; host
# RSS carries glibc's history (docs/design.md §2), so it gets a wider margin.
MEMORY_NOISE = {"allocator": 0.01, "host": 0.05}
# What each step changes, as the words of the config it adds.
CHANGES = {"precision": ("precision",), "checkpointing": ("checkpointing",),
           "zero-1": ("zero", "world")}
CONFIG_KEYS = ("precision", "checkpointing", "zero", "world")
REFERENCES = {  # shown with _(): translated where the table is posted
    "precision": N_("NVIDIA AMP: mixed precision up to 3× faster on Tensor Core GPUs"),
    "checkpointing": N_("full-layer recomputation ≈30% more compute per layer (Megatron Bridge "
                        "docs); selective recomputation: 70% less activation memory for 2.7% "
                        "more FLOPs (GPT-3, via HF Accelerate's Megatron-LM guide)"),
    "zero-1": N_("ZeRO-1 divides optimizer-state memory by the data-parallel degree "
                 "(Adam in mixed precision: 12 bytes/param, 1.5B params → 18 GB → 2.25 GB on 8 "
                 "ranks)"),
}
USAGE = ("/trial ladder llm-train batch=8 seq=512 [precision=bf16] [world=2] [budget=24GB]  |  "
         "/trial ladder hf-train model=NAME layers=2 ...")
TRAINING = ("llm-train", "hf-train")


def size(raw: str) -> int:
    try:
        return gpus.size_of(raw, "budget")
    except ValueError as exc:
        raise specs.SpecError(f"budget={raw}", str(exc), USAGE) from None


def parse(words: list[str]) -> tuple[list[tuple[str, specs.TrialSpec, str]], int | None]:
    """`llm-train k=v ... [budget=24GB]` → the ladder's trials, each parsed as a
    single trial would be, and the memory budget in bytes (or None)."""
    if not words or words[0] not in TRAINING:
        raise specs.SpecError(" ".join(words[:1]) or "ladder", _(
            "the ladder runs a training workload: `/trial ladder llm-train ...` or `/trial "
            "ladder hf-train model=NAME ...`"), USAGE)
    given = dict(w.partition("=")[::2] for w in words[1:] if "=" in w)
    budget = size(given.pop("budget")) if "budget" in given else None
    for fixed in ("checkpointing", "zero"):
        if fixed in given:
            raise specs.SpecError(f"{fixed}={given[fixed]}", _(
                "`{key}=`: the ladder sets it itself, one step at a time; leave it out",
                key=fixed), USAGE)
    precision = given.pop("precision", "bf16")
    if precision == "fp32":
        raise specs.SpecError("precision=fp32", _("`precision=fp32`: the ladder's first step "
                                                  "lowers precision from the fp32 baseline; "
                                                  "give bf16 or fp16"), USAGE)
    world = given.pop("world", "2")
    rest = [f"{k}={v}" for k, v in given.items()]
    for w in words[1:]:
        if "=" not in w:
            raise specs.SpecError(w, _("`{word}`: parameters are written key=value", word=w),
                                  USAGE)
    steps = [("baseline", ["precision=fp32", "checkpointing=none", "zero=0", "world=1"]),
             ("precision", [f"precision={precision}", "checkpointing=none", "zero=0", "world=1"]),
             ("checkpointing", [f"precision={precision}", "checkpointing=full", "zero=0",
                                "world=1"]),
             ("zero-1", [f"precision={precision}", "checkpointing=full", "zero=1",
                         f"world={world}"])]
    out = []
    for name, extra in steps:
        one = [words[0], *rest, *extra]
        out.append((name, specs.parse(one), " ".join(one)))
    return out, budget


def peak(report: Json) -> tuple[int | None, str, int]:
    """The step's peak memory per rank (the largest rank), how it was measured,
    and the part of it that is the runtime's own (host RSS before the model)."""
    ranks = (report.get("training") or {}).get("ranks") or []
    allocated = [r["peak_allocated"] for r in ranks if r.get("peak_allocated")]
    if allocated:
        return max(allocated), N_("torch allocator peak allocated, largest rank"), 0
    rss = [r for r in ranks if r.get("host_rss_peak")]
    if rss:
        top = max(rss, key=lambda r: r["host_rss_peak"])
        return (top["host_rss_peak"], N_("host max RSS (getrusage), largest rank"),
                top.get("host_rss_start") or 0)
    return None, N_("not measured"), 0


def rows(names: list[str], reports: list[Json | None]) -> list[Json]:
    base = reports[0] if reports and reports[0] and reports[0]["status"] == Outcome.OK else None
    base_loss = base["training"]["loss_final"] if base else None
    out, prev, prev_name = [], None, ""  # prev_name is read only with a prev
    for name, r in zip(names, reports):
        if not r or r["status"] != Outcome.OK:
            err = (r or {}).get("error") or {}
            out.append({"step": name, "ok": False,
                        "why": f"{err['class'] if 'class' in err else _('not run')}: "
                               f"{(err.get('message') or '').strip().splitlines()[-1:] or ''}"})
            continue
        mem, method, runtime = peak(r)
        t = r["training"]
        row = {"step": name, "ok": True, "trial": r.get("trial"), "memory": mem,
               "method": method, "seconds": r["latency"]["mean"], "loss": t["loss_final"],
               "steps": t["steps"], "world": t["world"],
               # hf-train's layers=0 is the config's depth: the built one
               "params": {**r["params"], "layers": r["params"].get("layers")
                          or (r.get("model") or {}).get("layers")},
               "counts": counts(r),
               "runtime": runtime}
        if base is not None:  # a loss that diverged (null: not finite) breaks quality
            row["quality"] = ((t["loss_final"] - base_loss) / base_loss
                              if t["loss_final"] is not None and base_loss else None)
            row["quality_ok"] = (row["quality"] is not None
                                 and abs(row["quality"]) <= QUALITY_TOLERANCE)
        row["sd"] = r["latency"].get("stdev")
        for ref, key in ((prev, "prev"), (base, "base")):
            if ref is not None and ref is not r:
                ref_mem, ref_method, _runtime = peak(ref)
                row[f"dmem_{key}"] = (mem - ref_mem) / ref_mem if (
                    mem and ref_mem and ref_method == method) else None
                row[f"dtime_{key}"] = row["seconds"] / ref["latency"]["mean"] - 1
        if prev is not None:  # the step against the one it was measured on top of
            row["time_test"] = compare.compare([prev], [r], names=(prev_name, name))
        if name == "zero-1":
            row["zero"] = [(x["rank"], x["optimizer_state_bytes"]) for x in t["ranks"]]
            row["zero_theory"] = t["optimizer_state_theory_per_rank"]
        out.append(row)
        prev, prev_name = r, name
    return out


def memory_noise(method: str) -> float:
    return MEMORY_NOISE["host" if "host" in method else "allocator"]


def judge(row: Json) -> Json:
    """A step that ran, against the step it was measured on top of: {saves,
    faster, slower (each beyond the noise), memory (words), time (words)}."""
    noise = memory_noise(row["method"])
    d = row.get("dmem_prev")
    saves, grows = d is not None and d < -noise, d is not None and d > noise
    memory = (_("memory not compared (another method)") if d is None else
              _("{share} less memory", share=format(-d, ".0%")) if saves else
              _("{share} more memory", share=format(d, ".0%")) if grows else
              _("memory {change}, within the {noise} noise of {method}", change=format(d, "+.1%"),
                noise=format(noise, ".0%"), method=_(row["method"])))
    t = row.get("time_test")
    verdict = t["verdict"] if t else None
    return {"saves": saves, "grows": grows, "faster": verdict == "faster",
            "slower": verdict == "slower", "memory": memory,
            "time": _("time {verdict}", verdict=compare.phrase(t)) if t else
            _("time not compared"),
            "marks": t["marks"] if t else []}


def config(row: Json) -> str:
    return " ".join(f"{k}={row['params'][k]}" for k in CONFIG_KEYS if k in row["params"])


# A step adopted: why (memory, time or both) and whether it is slower, each a sentence.
ADOPT = {("memory", False): N_("{step}: adopt for memory — {memory}; {time}; quality "
                               "held.{marks}"),
         ("memory", True): N_("{step}: adopt for memory, though slower — {memory}; {time}; "
                              "quality held.{marks}"),
         ("time", False): N_("{step}: adopt for time — {memory}; {time}; quality held.{marks}"),
         ("time", True): N_("{step}: adopt for time, though slower — {memory}; {time}; "
                            "quality held.{marks}"),
         ("both", False): N_("{step}: adopt for memory and time — {memory}; {time}; quality "
                             "held.{marks}"),
         ("both", True): N_("{step}: adopt for memory and time, though slower — {memory}; "
                            "{time}; quality held.{marks}")}


def recommend(table: list[Json], budget: int | None) -> list[str]:
    """Adopt a step when its gain is beyond the noise (time faster by the test,
    or memory saved beyond MEMORY_NOISE) and quality holds; go on while the run
    still exceeds the budget; when nothing fits, say what to change. Ends with
    the configuration recommended."""
    lines, adopted = [], []
    current = table[0] if table and table[0]["ok"] else None
    if current is None:
        return [_("The baseline did not run, so no step can be judged; fix it first.")]
    if budget is not None and current["memory"] and current["memory"] <= budget:
        return [_("The baseline already fits the budget ({peak} ≤ {budget}): adopt nothing "
                  "for memory's sake.", peak=units.size(current["memory"]),
                  budget=units.size(budget)),
                _("Recommended configuration: {config} (the baseline, {trial}).",
                  config=config(current), trial=current.get("trial") or _("as measured"))]
    fits = False
    for row in table[1:]:
        if not row["ok"]:
            lines.append(_("{step}: did not run ({why}); not adopted.", step=row["step"],
                           why=row["why"]))
            continue
        if not row.get("quality_ok", False):
            lines.append(_("{step}: quality broke (loss {loss} against the fp32 baseline, "
                           "tolerance ±{tolerance}): not adopted, whatever it saves.",
                           step=row["step"], loss=_change(row.get("quality"), "+.2%"),
                           tolerance=format(QUALITY_TOLERANCE, ".0%")))
            continue
        j = judge(row)
        values = {"step": row["step"], "memory": j["memory"], "time": j["time"],
                  "marks": f" ({'; '.join(j['marks'])})" if j["marks"] else ""}
        if j["saves"] or (j["faster"] and not j["grows"]):
            adopted.append(row["step"])
            current = row
            why = "memory" if j["saves"] and not j["faster"] else (
                "time" if not j["saves"] else "both")
            lines.append(_(ADOPT[why, bool(j["slower"])], **values))
        else:
            lines.append(_("{step}: not adopted: no measurable gain — {memory}; {time}.{marks}",
                           **values))
        if budget is not None and current["memory"] and current["memory"] <= budget:
            lines.append(_("Fits the budget after {steps}: {peak} ≤ {budget}. Stop here.",
                           steps=", ".join(adopted), peak=units.size(current["memory"]),
                           budget=units.size(budget)))
            fits = True
            break
    if not fits and budget is not None and current["memory"]:
        lines.append(_("Nothing fits {budget}: the best is {peak} ({over} over). Redefine the "
                       "goal:", budget=units.size(budget), peak=units.size(current["memory"]),
                       over=units.size(current["memory"] - budget)))
        lines.extend(redefine(current, budget, per_sequence(table)))
    return lines + chain(table, adopted, current)


def chain(table: list[Json], adopted: list[str], current: Json) -> list[str]:
    """The steps are queued together, each on top of the previous, so a later
    step carries the changes of one that was not adopted: say so, and end with
    the configuration recommended (the last adopted step's, as measured)."""
    out, steps = [], [r["step"] for r in table]
    for i, row in enumerate(table[1:], start=1):
        later = [r["step"] for r in table[i + 1:] if r["ok"]]
        if row["step"] in adopted or not later or not row["ok"]:
            continue
        change = " ".join(f"{k}={row['params'].get(k, '?')}" for k in CHANGES[row["step"]])
        out.append(ngettext("{later} was measured with {change} anyway ({step} was not "
                            "adopted; the ladder queues every step at once, each on top of the "
                            "previous).",
                            "{later} were measured with {change} anyway ({step} was not "
                            "adopted; the ladder queues every step at once, each on top of the "
                            "previous).", len(later), later=joined(later, AND), change=change,
                            step=row["step"]))
    kept = [s for s in steps[1:steps.index(current["step"]) + 1] if s not in adopted]
    values = {"config": config(current), "trial": current.get("trial") or _("as measured"),
              "step": current["step"]}
    if current["step"] == "baseline":
        out.append(_("Recommended configuration: {config} (the baseline, {trial}).", **values))
    elif kept:
        out.append(_("Recommended configuration: {config} (the {step} step, {trial}; it keeps "
                     "{kept}, not adopted on its own, because {step} was measured on top of it "
                     "— to drop it, run that config as a trial).", kept=joined(kept, AND),
                     **values))
    else:
        out.append(_("Recommended configuration: {config} (the {step} step, {trial}).",
                     **values))
    return out


# the posted table -------------------------------------------------------------

def queued(jobs: list[Json], budget: int | None) -> Json:
    steps = "\n".join(f"• {j['trial']} {name}: `{j['words']}`" for j, name in zip(jobs, STEPS))
    head = (_("Queued ladder *L{id}* against a budget of {budget}: each step on top of the "
              "previous, judged by the loss after the same steps from the same seed.",
              id=jobs[0]["id"], budget=units.size(budget)) if budget else
            _("Queued ladder *L{id}*: each step on top of the previous, judged by the loss "
              "after the same steps from the same seed.", id=jobs[0]["id"]))
    return reply(f"{head}\n{steps}\n"
                 + _("The table is posted in this channel when the last step ends."))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.0%}"


def message(jobs: list[Json], reports: list[Json | None], budget: int | None) -> Json:
    table = rows(list(STEPS), reports)
    head = [_("step"), _("trial"), _("peak mem"), _("step time ±sd"), _("Δmem prev/base"),
            _("Δtime prev/base"), _("loss Δ vs fp32")]
    cells = [head]
    for row in table:
        if not row["ok"]:
            cells.append([row["step"], "", row["why"][:60], "", "", "", ""])
            continue
        change = _change(row["quality"], "+.3%") if "quality" in row else None
        quality = ("—" if change is None else
                   _("{change} ok", change=change) if row["quality_ok"] else
                   _("{change} BROKE", change=change))
        cells.append([row["step"], row.get("trial") or "",
                      units.size(row["memory"]),
                      units.duration(row["seconds"])
                      + (f" ±{units.duration(row['sd'])}" if row.get("sd") else ""),
                      f"{_pct(row.get('dmem_prev'))} / {_pct(row.get('dmem_base'))}",
                      f"{_pct(row.get('dtime_prev'))} / {_pct(row.get('dtime_base'))}",
                      quality])
    grid = table_text(cells)
    ok = {r["step"]: r for r in table if r["ok"]}
    notes = []
    if "baseline" in ok:
        notes.append(_("Memory: {method}; quality: loss after {steps} steps from the same "
                       "seed, tolerance ±{tolerance} of the fp32 baseline.",
                       method=_(ok["baseline"]["method"]), steps=ok["baseline"]["steps"],
                       tolerance=f"{QUALITY_TOLERANCE:.0%}"))
    if "precision" in ok and ok["precision"].get("time_test"):
        notes.append(_("Precision: time {verdict} (reference: {reference}).",
                       verdict=compare.phrase(ok["precision"]["time_test"]),
                       reference=_(REFERENCES["precision"])))
    if "checkpointing" in ok and ok["checkpointing"].get("time_test"):
        c = ok["checkpointing"]
        notes.append(_("Checkpointing: memory {change}, time {verdict} (recomputation adds "
                       "work, so a faster step is noise unless the interval says otherwise; "
                       "reference: {reference}).", change=_pct(c.get("dmem_prev")),
                       verdict=compare.phrase(c["time_test"]),
                       reference=_(REFERENCES["checkpointing"])))
    if "zero-1" in ok:
        z = ok["zero-1"]
        per = ", ".join(_("rank {rank} {size} MiB", rank=r, size=format(b / 2**20, ".2f"))
                        for r, b in z["zero"])
        worst = max(abs(b - z["zero_theory"]) / z["zero_theory"] for _rank, b in z["zero"])
        notes.append(_("ZeRO-1 over {world} ranks: optimizer states measured {per}; theory "
                       "{theory} MiB per rank (AdamW's two fp32 moments, 8 bytes/param, ÷ "
                       "{world}; autocast keeps the weights fp32, so there is no separate "
                       "master copy — the reference's 12 bytes/param counts one), worst rank "
                       "{worst} off. Each rank also holds only batch/{world} sequences of "
                       "activations, so its peak falls by more than the states alone. "
                       "(Reference: {reference}.)", world=z["world"], per=per,
                       theory=format(z["zero_theory"] / 2**20, ".2f"), worst=format(worst, ".2%"),
                       reference=_(REFERENCES["zero-1"])))
    advice = recommend(table, budget)
    text = (_("*Ladder L{id}* ({first}–{last})", id=jobs[0]["id"], first=jobs[0]["trial"],
              last=jobs[-1]["trial"]) + f"\n```{grid}```\n"
            + "\n".join(notes) + "\n" + _("*Recommendation*:") + "\n"
            + "\n".join(a if a.startswith(" ") else f"• {a}" for a in advice))
    return {"channel": jobs[0]["channel"], "kind": "ladder", "text": text,
            "blocks": [section(part) for part in chunks(text)]}


def _change(quality: float | None, spec: str) -> str:
    """The loss's change against the baseline's; null when either loss diverged."""
    return _("not finite") if quality is None else format(quality, spec)
