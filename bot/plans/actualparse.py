"""`/plan NAME actual KIND ...` as a command: an actual given by hand or read
from Slurm, a correction of one (the fields it names change, the rest stay)
and a deletion. Pure: no Slack, no SQL."""
from __future__ import annotations

import datetime as dt
import re

from bot.plans.grammar import PlanCommand, PlanError, count, hours, key_values
from bot.plans.parse import BLOCK_KINDS
from bot.states import Json
from worker.i18n import _

SLURM_JOB = re.compile(r"\d{1,12}(_\d{1,9})?")  # a job id, or an array task (123_4)
MAX_SLURM_JOBS = 100
PARTS = ("prep", "data", "retries", "idle")
FIELDS = ("hours", *PARTS, "runs", "note")  # what a correction may change
CORRECT_USAGE = "`/plan NAME actual KIND correct [#N] hours=H|prep=H|runs=N|note=...`"


def parse_actual_words(plan: str | None, word: str, rest: list[str],
                       today: dt.date) -> PlanCommand:
    return PlanCommand("actual", plan, parse_actual(rest))


def parse_actual(words: list[str]) -> Json:
    if not words or words[0] not in BLOCK_KINDS:
        usage = ("`/plan NAME actual KIND hours=H [prep=H] [data=H] [retries=H] "
                 "[idle=H] [runs=N] [note=...] [confirm]`, `/plan NAME actual KIND "
                 "slurm=JOBID[,JOBID...] [runs=N] [note=...]`, " + CORRECT_USAGE
                 + ", or `/plan NAME actual KIND delete [#N]`")
        kinds = ", ".join(BLOCK_KINDS)
        raise PlanError(_("`{word}` is not a block kind: one of {kinds}. Usage: {usage}",
                          word=words[0], kinds=kinds, usage=usage) if words else
                        _("Name the block: one of {kinds}. Usage: {usage}", kinds=kinds,
                          usage=usage))
    if words[1:2] == ["delete"]:
        return {"block": words[0], "delete": True, "ids": actual_ids(words[0], words[2:])}
    if words[1:2] == ["correct"]:
        return parse_correction(words[0], words[2:])
    rest = words[1:]
    confirm = "confirm" in [w.lower() for w in rest]  # an actual far above its estimate
    rest = [w for w in rest if w.lower() != "confirm"]
    pairs = key_values(rest, ("hours", "slurm", *PARTS, "runs", "note"), _("an actual"))
    if "slurm" in pairs:
        return parse_slurm_actual(words[0], pairs)
    if "hours" not in pairs:
        raise PlanError(_("an actual needs hours=H (the GPU-hours the block really took) or "
                          "slurm=JOBID (read them from Slurm's accounting)"))
    total = hours(pairs["hours"], "hours", positive=True)
    parts = {k: hours(pairs[k], k) for k in PARTS if k in pairs}
    check_parts(parts, total)
    return {"block": words[0], "hours": total, "parts": parts, "note": pairs.get("note"),
            "runs": count(pairs["runs"], "runs") if "runs" in pairs else None,
            "correct": False, "confirm": confirm}


def check_parts(parts: Json, total: float) -> None:
    if sum(parts.values()) > total:
        raise PlanError(_("prep, data, retries and idle add up to {parts} h, more than "
                          "hours={total}", parts=f"{sum(parts.values()):g}", total=f"{total:g}"))


def parse_correction(kind: str, words: list[str]) -> Json:
    """`correct [#N] key=value ...`: the fields named, each checked; `key=` with
    nothing after it unsets one (not hours=). Which actual is the handler's to
    find: #N, or the block's only one."""
    ids = [w for w in words if re.fullmatch(r"#\d{1,12}", w)]
    confirm = any(w.lower() == "confirm" for w in words)
    rest = [w for w in words if w not in ids and w.lower() != "confirm"]
    if len(ids) > 1:
        raise PlanError(_("`{word}`: a correction changes one actual; correct {first} and "
                          "{word} one at a time", word=ids[1], first=ids[0]))
    if "slurm" in [w.partition("=")[0] for w in rest]:
        raise PlanError(_("`correct` with `slurm=`: Slurm's answer arrives later; delete the "
                          "earlier one first (`/plan NAME actual {kind} delete`), then ask "
                          "again", kind=kind))
    if not rest:
        raise PlanError(_("`/plan NAME actual {kind} correct` needs the fields to change, e.g. "
                          "`/plan NAME actual {kind} correct hours=0.3` (it takes {keys}; "
                          "`#N` names the actual when the block has several)", kind=kind,
                          keys=", ".join(FIELDS)))
    pairs = key_values(rest, FIELDS, _("a correction of an actual"), empty=True)
    if pairs.get("hours") == "":
        raise PlanError(_("`hours=`: an actual keeps its hours; give the corrected figure, "
                          "e.g. hours=0.3, or delete it (`/plan NAME actual {kind} delete`)",
                          kind=kind))
    changes: Json = {}
    for key, raw in pairs.items():
        if not raw:
            changes[key] = None
        elif key == "runs":
            changes[key] = count(raw, key)
        elif key == "note":
            changes[key] = raw
        else:
            changes[key] = hours(raw, key, positive=key == "hours")
    return {"block": kind, "correct": True, "confirm": confirm, "changes": changes,
            "id": int(ids[0][1:]) if ids else None}


def corrected(old: Json, changes: Json) -> Json:
    """The stored fields a correction changes (hours, parts, runs, note), the
    rest of `old` kept; refused when the parts would exceed the hours, when a
    Slurm actual's figures are changed by hand, or when nothing changes."""
    figures = [k for k in ("hours", *PARTS) if k in changes]
    if old.get("slurm") and figures:
        raise PlanError(_("`{key}=`: #{id} was read from Slurm's accounting (jobs {jobs}), so "
                          "its hours are Slurm's; correct its runs= or note=, or delete it "
                          "(`/plan NAME actual {kind} delete #{id}`) and record the hours by "
                          "hand", key=figures[0], id=old["id"], jobs=", ".join(old["slurm"]),
                          kind=old["block"]))
    parts = dict(old.get("parts") or {})
    for key in PARTS:
        if key in changes:
            if changes[key] is None:
                parts.pop(key, None)
            else:
                parts[key] = changes[key]
    new: Json = {"hours": changes.get("hours", old["hours"]), "parts": parts,
           "runs": changes.get("runs", old.get("runs")),
           "note": changes.get("note", old.get("note"))}
    check_parts(parts, new["hours"])
    was = {"hours": old["hours"], "parts": old.get("parts") or {}, "runs": old.get("runs"),
           "note": old.get("note")}
    out = {k: v for k, v in new.items() if v != was[k]}
    if not out:
        raise PlanError(_("#{id} has those values already; nothing to correct", id=old["id"]))
    return out


def actual_ids(kind: str, words: list[str]) -> list[int] | None:
    """`#4 #5` (or `4,5`): the recorded actuals to delete; None: all of the block's."""
    ids = []
    for word in ",".join(words).split(","):
        if not word.strip():
            continue
        m = re.fullmatch(r"#?(\d{1,12})", word.strip())
        if not m:
            raise PlanError(_("`{word}`: `/plan NAME actual {kind} delete` takes nothing more "
                              "than the numbers of the actuals to delete, e.g. `delete #4` "
                              "(the reply that recorded one shows its number), or none to "
                              "delete them all", word=word, kind=kind))
        ids.append(int(m.group(1)))
    return ids or None


def parse_slurm_actual(kind: str, pairs: Json) -> Json:
    """`slurm=123,124`: the hours come from Slurm's accounting, so hours= and the
    parts (prep, data, retries, idle) cannot be given beside it."""
    given = [k for k in ("hours", *PARTS) if k in pairs]
    if given:
        raise PlanError(_("`{key}=` and `slurm=` together: slurm= reads the hours from "
                          "Slurm's accounting (jobs that did not complete count as retries); "
                          "give hours=H or slurm=JOBID, not both", key=given[0]))
    ids = []
    for word in pairs["slurm"].split(","):
        word = word.strip()
        if not SLURM_JOB.fullmatch(word):
            raise PlanError(_("`slurm={raw}`: `{word}` is not a Slurm job id; write the numbers "
                              "sbatch printed, e.g. slurm=123456 or slurm=123456,123457 (an "
                              "array task: 123456_7)", raw=pairs["slurm"], word=word))
        if word in ids:
            raise PlanError(_("`slurm={raw}`: job {job} is given twice", raw=pairs["slurm"],
                              job=word))
        ids.append(word)
    if len(ids) > MAX_SLURM_JOBS:
        raise PlanError(_("`slurm=`: at most {most} job ids at once (an array job's id counts "
                          "once for all its tasks)", most=MAX_SLURM_JOBS))
    return {"block": kind, "slurm": ids, "hours": None, "parts": {}, "note": pairs.get("note"),
            "runs": count(pairs["runs"], "runs") if "runs" in pairs else None}
