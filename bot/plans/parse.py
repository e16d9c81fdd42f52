"""Parsing of `/plan` text into a command, and checking of every value a plan
stores: facts and blocks. Actuals are actualparse.py's, prices priceparse.py's
and digest schedules digestparse.py's; the checks they all share (pairs,
numbers, GPU names, the error and the command) are grammar.py's. Pure: no Slack, no SQL,
no clock (today's date is passed in)."""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from bot.context import PLAN_WORDS, plan_name_problem
from bot.plans import money
from bot.plans.digestparse import parse_digest
from bot.plans.grammar import (
    PlanCommand,
    PlanError,
    count,
    gpu_item,
    hours,
    key_values,
    no_more,
    period_days,
    utilization,
)
from bot.plans.priceparse import parse_price, parse_price_change
from bot.states import Json
from bot.trials.parse import split
from worker import i18n
from worker.i18n import N_, _, did_you_mean, sentences

USAGE = ("/plan new NAME | /plan list | /plan NAME [show|set k=v ...|set k=|block KIND runs=N "
         "trial=T12 ...|block KIND correct k=v ...|block KIND delete|lock|unlock|advise|"
         "actual KIND hours=H|slurm=JOBID|actual KIND correct [#ID] k=v ...|"
         "actual KIND delete [#ID]|review|history|export|check [repo=URL] [commit=SHA]] | "
         "/plan price GPU RATE/h source=... date=YYYY-MM-DD | /plan price correct P7 ... | "
         "/plan price delete P7 | /plan prices [all] | "
         "/plan digest [weekly DAY HH:MM TIMEZONE|now|off] | /plan settings [lang=ko] | "
         "/plan help")

BLOCK_KINDS = ("baseline", "compare", "scale", "verify")
ACTIONS = ("show", "export", "lock", "unlock", "advise", "review", "set", "block", "actual",
           "check")

# The reproduction checklist, in the order a reproduction settles it.
CHECKLIST = {
    "paper": N_("paper and version (e.g. arXiv 2405.01234v2)"),
    "baseline": N_("the baseline to reproduce"),
    "configs": N_("the configs to compare"),
    "repo": N_("repository and commit"),
    "command": N_("run command"),
    "framework": N_("framework and dependencies"),
    "model": N_("model and weights"),
    "access": N_("access conditions of the weights"),
    "licence": N_("licence of code and weights"),
    "inputs": N_("input lengths and batch conditions"),
    "data": N_("data preparation"),
    "scope": N_("results in scope"),
    "excluded": N_("results excluded"),
    "gpu": N_("target GPU kind (e.g. H100)"),
    "platform": N_("target platform: cuda, rocm, mps, cpu or tpu"),
}
# Items the lock fixes: the input conditions of the experiment.
LOCKED_ITEMS = ("baseline", "configs", "inputs", "data", "model", "repo", "command")

# Planning facts the estimate and the advice read.
SETTINGS = {
    "rental": N_("single | per-block: one rental session for the whole plan, or one per "
                 "block (prep is paid again in every session)"),
    "handoff": N_("hours a rented GPU waits between blocks (a declared hand-off gap)"),
    "idle": N_("measured | none: count the workers' measured idle share, or no idle"),
    "pattern": N_("concentrated | steady: is the work bunched in one period or steady"),
    "period": N_("how long the work lasts, e.g. 10d, 6w, 3mo, 1y"),
    "later_use": N_("uncertain | planned: is there use for the GPUs after this work"),
    "needs_cuda": N_("yes | no: does the code need CUDA (its support matrix, not the GPU name)"),
    "utilization": N_("share of the time an owned GPU would be busy, e.g. 0.6 or 60%"),
}
_KEYWORDS = {*PLAN_WORDS, *ACTIONS}

CHOICES = {"rental": ("single", "per-block"), "idle": ("measured", "none"),
           "pattern": ("concentrated", "steady"), "later_use": ("uncertain", "planned"),
           "needs_cuda": ("yes", "no"), "platform": ("cuda", "rocm", "mps", "cpu", "tpu")}



def words_of(text: str) -> list[str]:
    """`/plan`'s words, keywords and plan names in any case (`/plan ADKV Show`);
    values keep theirs."""
    try:
        words = split(text)
    except ValueError as exc:
        raise PlanError(getattr(exc, "message", str(exc))) from None
    words[:2] = [w.lower() if w.lower() in _KEYWORDS else w for w in words[:2]]
    if words[1:2] and words[1] in ("block", "actual") and words[2:3]:
        words[2] = words[2].lower() if words[2].lower() in BLOCK_KINDS else words[2]
    if words[1:2] == ["actual"] and words[3:4] and words[3].lower() in ("delete", "correct"):
        words[3] = words[3].lower()
    if words[:1] == ["digest"] and words[1:2]:
        words[1] = words[1].lower()
    return words


# One parser per word of `/plan` (bot/plans/command.py's table routes to them):
# each takes the plan's name (None before a plan's name), its word, the words
# after it and today.

def parse_help(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    """`/plan help [TOPIC]`; the topic is checked against the table (command.py)."""
    return PlanCommand("help", args={"topic": " ".join(rest).lower()})


def parse_alone(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    """A word that takes nothing more: `/plan list`, `/plan NAME lock`."""
    no_more(rest, f"/plan {plan} {word}" if plan else f"/plan {word}")
    return PlanCommand(word, plan)


def parse_prices(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    no_more(rest[1:] if rest[:1] == ["all"] else rest, "/plan prices [all]")
    return PlanCommand("prices", args={"all": rest[:1] == ["all"]})


def parse_settings_words(plan: str | None, word: str, rest: list[str],
                         today: dt.date) -> PlanCommand:
    return PlanCommand("settings", args=parse_settings(rest))


def parse_price_words(plan: str | None, word: str, rest: list[str],
                      today: dt.date) -> PlanCommand:
    if rest[:1] in (["correct"], ["delete"]):
        return parse_price_change(rest[0], rest[1:])
    return PlanCommand("price", args=parse_price(rest, today))


def parse_new(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    if not rest:
        raise PlanError(_("Name the plan: `/plan new NAME`, e.g. `/plan new adkv-repro`"))
    return PlanCommand("new", plan_name(rest[0]), {"facts": parse_facts(rest[1:])})


def parse_digest_words(plan: str | None, word: str, rest: list[str],
                       today: dt.date) -> PlanCommand:
    return parse_digest(rest)


def parse_set(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    if not rest:
        raise PlanError(_("`/plan {plan} set` needs key=value pairs, e.g. `/plan {plan} set "
                          "gpu=H100 platform=cuda`.", plan=plan) + " " + keys_help())
    # `key=` with nothing after it unsets the item (None)
    return PlanCommand("set", plan, {"facts": parse_facts(rest, unset=True)})


def parse_block_words(plan: str | None, word: str, rest: list[str],
                      today: dt.date) -> PlanCommand:
    if rest[1:2] in (["correct"], ["delete"]):
        return parse_block_change(plan, rest)
    return PlanCommand("block", plan, parse_block(rest))


def not_an_action(action: str, plan: str = "NAME", known: Iterable[str] = ()) -> PlanError:
    """`/plan adkv shwo`: what a plan does, and the word `action` is a slip of."""
    return PlanError(sentences(
        _("`{action}` is not something a plan does.", action=action),
        did_you_mean(action, known, f"/plan {plan} "),
        _("Use one of show, set, block, lock, unlock, advise, actual, review, history, export. "
          "Usage: `{usage}`", usage=USAGE)))


def parse_settings(words: list[str]) -> Json:
    """`/plan settings [lang=ko] [currency=KRW]`: this channel's own settings
    (`lang=`, `currency=` clear them)."""
    pairs = key_values(words, ("lang", "currency"), _("a channel setting"), empty=True)
    out: Json = {}
    if pairs.get("currency"):
        try:
            out["currency"] = money.currency(pairs["currency"])
        except money.MoneyError as exc:
            raise PlanError(exc.message) from None
    elif "currency" in pairs:
        out["currency"] = None
    if "lang" not in pairs:
        return out
    try:
        return {**out, "lang": i18n.language(pairs["lang"]) if pairs["lang"] else None}
    except i18n.LanguageError as exc:
        raise PlanError(_("{problem}; `lang=` goes back to the bot's default",
                          problem=exc.message)) from None


def plan_name(word: str) -> str:
    name = word.lower()  # names are stored in lower case: ADKV is adkv
    if name in PLAN_WORDS:
        raise PlanError(_("`{word}` needs more words here; usage: `{usage}`", word=name,
                          usage=USAGE))
    problem = plan_name_problem(name) and plan_name_problem(word)
    if problem:
        raise PlanError(problem)  # naming the word as typed
    return name


def keys_help() -> str:
    return _("Checklist: {checklist}. Settings: {settings}. `/plan help set` explains each.",
             checklist=", ".join(CHECKLIST), settings=", ".join(SETTINGS))


def parse_facts(words: list[str], unset: bool = False) -> Json:
    """Checklist items and settings, each value checked; with `unset`, `key=`
    (nothing after =) is None: the item is open again."""
    pairs = key_values(words, (*CHECKLIST, *SETTINGS), _("a plan"), empty=unset)
    out: Json = {}
    for key, raw in pairs.items():
        if len(raw) > 500:
            raise PlanError(_("`{key}`: at most 500 characters", key=key))
        if not raw:
            out[key] = None
        elif key in CHOICES:
            value = raw.lower()
            if value not in CHOICES[key]:
                raise PlanError(_("`{key}={raw}`: {key} must be one of {choices}", key=key,
                                  raw=raw, choices=", ".join(CHOICES[key])))
            out[key] = value
        elif key == "gpu":
            out[key] = target_gpu(raw)
        elif key == "handoff":
            out[key] = hours(raw, key)
        elif key == "period":
            out[key] = period_days(raw)
        elif key == "utilization":
            out[key] = utilization(raw)
        else:
            out[key] = raw
    return out


def target_gpu(raw: str) -> str:
    """A plan's target: `cpu`, or a GPU of the one table (bot/fits/gpus.py), stored by
    its table name so prices and fits find it (`h100-sxm` is H100-80GB)."""
    if raw.lower() in ("cpu", "none"):
        return raw.lower()
    return gpu_item(raw, "gpu=")


def trial_ids(raw: str) -> list[int]:
    ids = []
    for word in raw.split(","):
        m = re.fullmatch(r"[Tt]?(\d{1,12})", word.strip())
        if not m:
            raise PlanError(_("`trial={raw}`: `{word}` is not a trial id; write trial=T12 or "
                              "trial=T12,T13 (trials of the same config)", raw=raw, word=word))
        if int(m.group(1)) in ids:
            raise PlanError(_("`trial={raw}`: T{id} is given twice", raw=raw, id=m.group(1)))
        ids.append(int(m.group(1)))
    return ids


BLOCK_KEYS = ("runs", "configs", "gpus", "trial", "sweep", "note", "handoff", "batch",
              "prompt", "gen", "layers")
PREDICT_KEYS = ("batch", "prompt", "gen", "layers")
# A recipe sweep predicts on its own parameter (`sweep=S6 max_tokens=64`): the
# service checks that the sweep varied it (bot/plans/service.py).
SWEPT_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


def split_swept(words: list[str]) -> tuple[list[str], Json]:
    """A block's words apart from `name=N` pairs for a recipe's own parameters."""
    mine, swept = [], {}
    for word in words:
        key, eq, raw = word.partition("=")
        if key in BLOCK_KEYS or not eq:
            mine.append(word)
        elif not SWEPT_NAME.fullmatch(key):
            raise PlanError(_("`{word}`: a block takes {keys}, and with sweep=S12 the swept "
                              "parameter to predict at, e.g. max_tokens=64", word=word,
                              keys=", ".join(BLOCK_KEYS)))
        elif key in swept:
            raise PlanError(_("`{word}`: {key} is given twice", word=word, key=key))
        else:
            swept[key] = count(raw.strip(), key)
    return mine, swept


def parse_block(words: list[str]) -> Json:
    if not words or words[0] not in BLOCK_KINDS:
        kinds = ", ".join(BLOCK_KINDS)
        raise PlanError(
            _("`{word}` is not a block kind: one of {kinds}. Usage: `/plan NAME block KIND "
              "runs=N [configs=M] trial=T12 [note=\"open variable ...\"]`", word=words[0],
              kinds=kinds) if words else
            _("Name the block kind: one of {kinds}. Usage: `/plan NAME block KIND runs=N "
              "[configs=M] trial=T12 [note=\"open variable ...\"]`", kinds=kinds))
    kind = words[0]
    sweep = any(w.startswith("sweep=") for w in words[1:])
    mine, swept = split_swept(words[1:]) if sweep else (words[1:], {})
    pairs = key_values(mine, BLOCK_KEYS, _("a {kind} block", kind=kind))
    if "runs" not in pairs:
        raise PlanError(_("a {kind} block needs runs=N: how many runs the experiment makes",
                          kind=kind))
    if ("trial" in pairs) == ("sweep" in pairs):
        raise PlanError(_("a {kind} block is estimated from measured trials: give trial=T12 "
                          "(or trial=T12,T13), or sweep=S12 with the config to predict",
                          kind=kind))
    block: Json = {"kind": kind, "runs": count(pairs["runs"], "runs"),
             "configs": count(pairs.get("configs", "1"), "configs", 10000),
             "gpus": count(pairs.get("gpus", "1"), "gpus", 4096),
             "note": pairs.get("note"), "trials": [], "sweep": None, "predict": {},
             "handoff": hours(pairs["handoff"], "handoff") if "handoff" in pairs else None}
    predict = {**{k: count(pairs[k], k) for k in PREDICT_KEYS if k in pairs}, **swept}
    if "trial" in pairs:
        if predict:
            raise PlanError(_("`{key}=`: a config to predict goes with sweep=S12; a block from "
                              "trial=T12 is estimated at that trial's own config",
                              key=next(iter(predict))))
        block["trials"] = trial_ids(pairs["trial"])
    else:
        m = re.fullmatch(r"[Ss]?(\d{1,12})", pairs["sweep"])
        if not m:
            raise PlanError(_("`sweep={raw}`: sweep ids look like S12", raw=pairs["sweep"]))
        if not predict:
            raise PlanError(_("a block from a sweep needs the config to predict, e.g. "
                              "sweep=S12 batch=32 prompt=2048"))
        block["sweep"], block["predict"] = int(m.group(1)), predict
    return block


def parse_block_change(name: str | None, words: list[str]) -> PlanCommand:
    """`block KIND correct k=v ...` (the given fields change, the rest stay) and
    `block KIND delete`."""
    kind, verb, rest = words[0], words[1], words[2:]
    if kind not in BLOCK_KINDS:
        raise PlanError(_("`{word}` is not a block kind: one of {kinds}", word=kind,
                          kinds=", ".join(BLOCK_KINDS)))
    if verb == "delete":
        no_more(rest, f"/plan {name} block {kind} delete")
        return PlanCommand("block-delete", name, {"kind": kind})
    if not rest:
        raise PlanError(_("`/plan {plan} block {kind} correct` needs the fields to change, "
                          "e.g. `/plan {plan} block {kind} correct runs=30` (it takes {keys})",
                          plan=name, kind=kind, keys=", ".join(BLOCK_KEYS)))
    # Other keys are a sweep's parameters or mistakes: parse_block checks them
    # with the block's own words (sweep= or trial=).
    mine = [w for w in rest if w.partition("=")[0] in BLOCK_KEYS]
    pairs = key_values(mine, BLOCK_KEYS, _("a {kind} block", kind=kind))
    pairs.update(w.partition("=")[::2] for w in rest if w not in mine)
    return PlanCommand("block-correct", name, {"kind": kind, "pairs": pairs})


def block_words(block: Json, changes: Json) -> list[str]:
    """A stored block as the words that make it, with `changes` (key=value
    pairs) applied: a correction is checked exactly as a new block is.
    trial= replaces a sweep and its predicted config, sweep= the trials."""
    pairs = {"runs": block["runs"], "configs": block["configs"], "gpus": block["gpus"]}
    if block.get("trials"):
        pairs["trial"] = ",".join(f"T{i}" for i in block["trials"])
    elif block.get("sweep"):
        pairs.update(sweep=f"S{block['sweep']}", **(block.get("predict") or {}))
    for key in ("note", "handoff"):
        if block.get(key) is not None:
            pairs[key] = block[key]
    predicted = set(block.get("predict") or {})
    if "trial" in changes:
        for key in ("sweep", *predicted):
            pairs.pop(key, None)
    if "sweep" in changes:
        pairs.pop("trial", None)
        if any(k not in BLOCK_KEYS or k in PREDICT_KEYS for k in changes):
            for key in predicted:
                pairs.pop(key, None)
    pairs.update(changes)
    return [block["kind"], *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in pairs.items())]
