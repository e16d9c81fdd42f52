"""Parsing of `/trial` text into a command. Pure: no Slack, no SQL, no clock."""
from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass, field

from bot.fits import gpus
from bot.states import Json
from bot.trials import ab, ladder
from worker.api import Workload, specs
from worker.i18n import _, did_you_mean, sentences

USAGE = specs.general_usage()
SWEEP_USAGE = ("/trial sweep llm-infer batch=1,2,4,8 prompt=512  |  "
               "/trial sweep llm-infer preset=llama-3-8b layers=1,2,4  |  "
               "/trial sweep recipe NAME batch=1,2,4")
FIT_USAGE = "/trial fit S12 [batch=32] [prompt=2048] [gen=64] [layers=32] [gpu=H100]"
MAX_SWEEP = 16  # trials in one sweep
# What a sweep may vary: the fit models batch and length (docs/design.md §3, "Scaling fits").
LLM_SWEEPABLE = ("batch", "prompt", "gen", "layers")  # layers: a depth sweep, alone
NOT_SWEEPABLE = ("timeout", "attempts")
LIST_FILTERS = ("mine", "running", "failed")  # how a trial is run, not what it measures


@dataclass(frozen=True)
class Command:
    name: str  # help status list run sweep fit ladder ab cancel workers
    job_id: int | None = None
    spec: specs.TrialSpec | None = None
    specs: tuple[specs.TrialSpec, ...] = ()  # sweep: one TrialSpec per config
    words: tuple[str, ...] = ()  # sweep: the words of each config
    sweep_id: int | None = None  # fit
    params: Json = field(default_factory=dict)  # fit: the config to predict
    gpu: gpus.Gpu | None = None  # fit: the GPU to answer "largest batch" for
    budget: int | None = None    # ladder: the memory budget in bytes
    which: str | None = None     # list: mine | running | failed (None: all recent)
    topic: str = ""              # help: a sub-command, a workload or `recipe NAME` ("": all)


_PLAIN = re.compile(r"[^'\"\\]*")  # no quote or backslash: shlex would only split on spaces
_WORD = re.compile(r"[^ \t\r\n]+")  # shlex's whitespace


def split(text: str) -> list[str]:
    text = text or ""
    if _PLAIN.fullmatch(text):
        return _WORD.findall(text)  # the same words, at a tenth of shlex's cost (an ack's path)
    try:
        return shlex.split(text)
    except ValueError as exc:  # an unclosed quote
        raise specs.SpecError(text, _("could not read `{text}`: {error}", text=text, error=exc),
                              USAGE) from None


# One parser per `/trial` sub-command, each given all the words (its own name
# first); bot/trials/command.py's table routes to them.

def parse_help(words: list[str], recipes: Json | None = None) -> Command:
    """`/trial help [TOPIC]`; the topic is checked where the table is (command.py)."""
    topic = words[1:]
    if topic[:1] and topic[0].lower() != "recipe":
        topic = [w.lower() for w in topic]  # `/trial help Sweep`; a recipe's name as written
    return Command("help", topic=" ".join(topic))


def parse_status(words: list[str], recipes: Json | None = None) -> Command:
    if len(words) != 2:
        raise specs.SpecError(" ".join(words), _("`/trial status` takes one trial id, "
                                                 "e.g. `/trial status T12`"), USAGE)
    return Command("status", job_id=parse_trial_id(words[1]))


def parse_cancel(words: list[str], recipes: Json | None = None) -> Command:
    if len(words) != 2:
        raise specs.SpecError(" ".join(words), _("`/trial cancel` takes one trial id, "
                                                 "e.g. `/trial cancel T12`"), USAGE)
    return Command("cancel", job_id=parse_trial_id(words[1]))


def parse_workers(words: list[str], recipes: Json | None = None) -> Command:
    if words[1:]:
        raise specs.SpecError(words[1], _("`{word}`: `/trial workers` takes no arguments",
                                          word=words[1]), USAGE)
    return Command("workers")


def parse_list(words: list[str], recipes: Json | None = None) -> Command:
    rest = [w.lower() for w in words[1:]] if len(words) == 2 else words[1:]
    if len(rest) > 1 or (rest and rest[0] not in LIST_FILTERS):
        raise specs.SpecError(" ".join(rest), sentences(
            _("`{words}`: `/trial list` takes one of {filters} or nothing.", words=" ".join(rest),
              filters=", ".join(LIST_FILTERS)),
            did_you_mean(rest[0], LIST_FILTERS, "/trial list ") if len(rest) == 1 else ""),
            USAGE)
    return Command("list", which=rest[0] if rest else None)


def parse_ab(words: list[str], recipes: Json | None = None) -> Command:
    pair, lines, _key = ab.parse(words[1:])
    return Command("ab", specs=tuple(pair), words=tuple(lines))


def parse_ladder(words: list[str], recipes: Json | None = None) -> Command:
    steps, budget = ladder.parse(words[1:])
    return Command("ladder", specs=tuple(s for _name, s, _words in steps),
                   words=tuple(w for _name, _spec, w in steps), budget=budget)


def parse_sweep_words(words: list[str], recipes: Json | None = None) -> Command:
    return parse_sweep(words[1:], recipes)


def parse_fit_words(words: list[str], recipes: Json | None = None) -> Command:
    return parse_fit(words[1:])


def parse_run(words: list[str], recipes: Json | None = None) -> Command:
    """A workload's name or `recipe NAME`, then its parameters."""
    return Command("run", spec=specs.parse(words, recipes))


def parse_sweep(words: list[str], recipes: Json | None = None) -> Command:
    """`llm-infer batch=1,2,4 prompt=512` → one spec per config of the cartesian
    product of the comma lists, each parsed exactly as a single trial."""
    if not words or (words[0] == "recipe" and len(words) < 2):
        raise specs.SpecError(" ".join(words), _("Name what to sweep, e.g. "
                                                 "`/trial sweep llm-infer batch=1,2,4 "
                                                 "prompt=512`"), SWEEP_USAGE)
    if words[0].lower() in (*specs.WORKLOADS, "recipe"):
        words = [words[0].lower(), *words[1:]]
    n_head = 2 if words[0] == "recipe" else 1
    head, rest = words[:n_head], words[n_head:]
    workload = ((recipes or {}).get(words[1]) if words[0] == "recipe"
                else specs.WORKLOADS.get(words[0]))
    if workload is None:
        specs.parse(head, recipes)  # raises the single trial's error (unknown workload/recipe)
    assert workload is not None  # specs.parse raised for an unknown one
    lists: dict[str, list[object]] = {}
    for word in rest:
        key, eq, raw = word.partition("=")
        if not eq or "," not in raw:
            continue  # a single value: the single-trial parse below judges it
        param = _sweep_param(word, key, workload)
        if key in lists:
            raise specs.SpecError(word, _("`{word}`: {key} is given twice", word=word, key=key),
                                  SWEEP_USAGE)
        lists[key] = _sweep_values(word, key, raw, param)
    _check_lists(words, lists, workload)
    configs, all_words = [], []
    for combo in itertools.product(*lists.values()):
        chosen = dict(zip(lists, combo))
        one = head + [f"{w.partition('=')[0]}={chosen[w.partition('=')[0]]}"
                      if w.partition("=")[0] in chosen else w for w in rest]
        configs.append(specs.parse(one, recipes))  # refused exactly as a single trial
        all_words.append(canonical(one, configs[-1]))
    return Command("sweep", specs=tuple(configs), words=tuple(all_words))


def _sweep_param(word: str, key: str, workload: Workload) -> specs.Param:
    """The parameter a sweep's list `word` names, if a sweep may vary it."""
    param = workload.param(key)
    if param is None:
        raise specs.no_parameter(word, workload, SWEEP_USAGE)
    if param.kind != "int":
        raise specs.SpecError(word, _("`{word}`: only whole-number parameters take a list "
                                      "in a sweep; {key} is a {kind}", word=word, key=key,
                                      kind=param.kind), SWEEP_USAGE)
    if key in NOT_SWEEPABLE or (not workload.recipe and key not in LLM_SWEEPABLE):
        message = (_("`{word}`: a sweep varies batch, prompt, gen or layers — the fits "
                     "model batch, length and depth only; give {key} one value",
                     word=word, key=key) if not workload.recipe else
                   _("`{word}`: a sweep varies batch and one length-like parameter — the "
                     "fits model batch, length and depth only; give {key} one value",
                     word=word, key=key))
        raise specs.SpecError(word, message, SWEEP_USAGE)
    return param


def _sweep_values(word: str, key: str, raw: str, param: specs.Param) -> list[object]:
    """The values of one comma list, each parsed as the parameter's one value."""
    usage = SWEEP_USAGE
    values: list[object] = []
    for item in raw.split(","):
        if not item:
            raise specs.SpecError(word, _("`{word}`: an empty item in the list; write "
                                          "values separated by commas, e.g. {key}=1,2,4",
                                          word=word, key=key), usage)
        try:
            value = param.parse(item, usage)
        except specs.SpecError as exc:
            raise specs.SpecError(word, _("`{word}`: in the list, {error}", word=word,
                                          error=exc.message), usage) from None
        if value in values:
            raise specs.SpecError(word, _("`{word}`: {value} is listed twice; give each "
                                          "value once", word=word, value=value), usage)
        values.append(value)
    return values


def _check_lists(words: list[str], lists: dict[str, list[object]], workload: Workload) -> None:
    """Refuse lists a sweep's fit cannot model, or too many configs."""
    usage = SWEEP_USAGE
    if not lists:
        raise specs.SpecError(" ".join(words), _("a sweep needs at least 2 configs: give a "
                                                 "parameter a comma list, e.g. `batch=1,2,4`"),
                              usage)
    depth = "layers" in lists and not workload.recipe
    if depth and workload.name not in ("llm-infer", "hf-infer"):
        raise specs.SpecError(" ".join(words), _("`layers=` as a list is a depth sweep, which "
                                                 "llm-infer and hf-infer run (its fit is of "
                                                 "inference memory and time); give {workload} "
                                                 "one layers value", workload=workload.name),
                              usage)
    if depth and 0 in lists["layers"]:
        raise specs.SpecError(" ".join(words), _("`layers=0` (the config's full depth) in a "
                                                 "depth sweep: give every depth as a number of "
                                                 "layers, e.g. layers=1,2,4"), usage)
    if depth and len(lists) > 1:
        raise specs.SpecError(" ".join(f"{k}=..." for k in lists), _(
            "a depth sweep varies layers alone (the fit is fixed + per-layer × layers); give "
            "{keys} one value, or run a separate batch sweep",
            keys=", ".join(k for k in lists if k != "layers")), usage)
    others = [k for k in lists if k != "batch"]
    if workload.recipe and len(others) > 1:
        raise specs.SpecError(" ".join(f"{k}=..." for k in others), _(
            "a recipe sweep varies `batch` and at most one other (length-like) parameter; this "
            "one lists {keys}", keys=", ".join(others)), usage)
    count = 1
    for values in lists.values():
        count *= len(values)
    if count > MAX_SWEEP:
        sizes = " × ".join(f"{len(v)} {k}" for k, v in lists.items())
        raise specs.SpecError(" ".join(words), _("{sizes} = {count} trials; a sweep runs at "
                                                 "most {most}: shorten a list", sizes=sizes,
                                                 count=count, most=MAX_SWEEP), usage)


def canonical(words: list[str], spec: specs.TrialSpec) -> str:
    """The words as the spec reads them, for echoes: `LLM-Infer dtype=BF16` is
    `llm-infer dtype=bf16`; other words (tags, routes, free text) as given."""
    out = []
    for word in words:
        key, eq, raw = word.partition("=")
        value = spec.params.get(key) if eq else None
        if isinstance(value, str) and value != raw and value.lower() == raw.lower():
            word = f"{key}={value}"
        elif not eq and word.lower() in (*specs.WORKLOADS, "recipe"):
            word = word.lower()
        out.append(word)
    return " ".join(out)


def parse_fit(words: list[str]) -> Command:
    """`S12 batch=32 prompt=2048 gpu=H100`: a question to a finished sweep."""
    if not words:
        raise specs.SpecError("fit", _("`/trial fit` takes a sweep id, e.g. "
                                       "`/trial fit S12 batch=32 gpu=H100`"), FIT_USAGE)
    sweep_id = parse_sweep_id(words[0])
    params: dict[str, int] = {}
    gpu = None
    for word in words[1:]:
        key, eq, raw = word.partition("=")
        if not eq or not key or not raw:
            raise specs.SpecError(word, _("`{word}`: write key=value, e.g. batch=32 or "
                                          "gpu=H100", word=word), FIT_USAGE)
        if key in params or (key == "gpu" and gpu is not None):
            raise specs.SpecError(word, _("`{word}`: {key} is given twice", word=word, key=key),
                                  FIT_USAGE)
        if key == "gpu":
            try:
                gpu = gpus.lookup(raw)
            except ValueError as exc:
                raise specs.SpecError(word, f"`{word}`: {exc}", FIT_USAGE) from None
            continue
        if not re.fullmatch(r"\d{1,9}", raw) or int(raw) < 1:
            raise specs.SpecError(word, _("`{word}`: {key} must be a whole number from 1 to "
                                          "999999999 in digits (a fit answers one config at a "
                                          "time), e.g. {key}=32", word=word, key=key), FIT_USAGE)
        params[key] = int(raw)
    return Command("fit", sweep_id=sweep_id, params=params, gpu=gpu)


def parse_sweep_id(word: str) -> int:
    m = re.fullmatch(r"[Ss]?(\d{1,12})", word)
    if not m:
        raise specs.SpecError(word, _("`{word}` is not a sweep id; sweep ids look like S12 "
                                      "(the reply to `/trial sweep` names it)", word=word),
                              FIT_USAGE)
    return int(m.group(1))


def parse_trial_id(word: str) -> int:
    m = re.fullmatch(r"[Tt]?(\d{1,12})", word)
    if not m:
        raise specs.SpecError(word, _("`{word}` is not a trial id; trial ids look like T12",
                                      word=word), USAGE)
    return int(m.group(1))
