"""Every message of the catalog, rendered in Korean, reads as Korean (docs/i18n.md):
no English word outside what stays as it is in every language (command words,
ids, names, units), one politeness level (합니다체), counters written against
their number and "…당" before the figure it divides."""
from __future__ import annotations

import re

import pytest

from bot import catalogs
from bot.digest.build import COMPONENTS
from bot.plans import digestparse, prices
from bot.plans import parse as plans
from bot.plans.command import TABLE as PLAN_TABLE
from bot.trials.command import TABLE as TRIAL_TABLE
from worker import environment, i18n, recipes, spec

# What stays English, beyond the shapes `_code` lets through (backticks, ids,
# ENV_NAMES, options, paths, key=value, acronyms). Each group says why.
UNITS = {"d", "w", "mo", "y", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "GPU-h",
         "h", "s", "ms", "min", "W", "kW", "kWh", "Hz", "FLOPs"}
# Products, programs, libraries and Slack's own screens: a reader looks them up as written.
NAMES = {"Slack", "Slurm", "Python", "PyTorch", "torch", "NVIDIA", "Hugging", "Face",
         "transformers", "glibc", "malloc", "mmap", "nvidia-smi", "nvidia-ml-py", "trialbot",
         "trialbot-worker", "SQLite", "Socket", "Mode", "OAuth", "Permissions", "Basic",
         "Information", "App-Level", "Tokens", "Bot", "User", "Token", "Reinstall", "to",
         "Workspace", "Adam", "AdamW", "ZeRO", "SwiGLU", "Student", "Volta", "Turing",
         "Ampere", "Hopper", "Ada", "Lovelace", "Blackwell", "Tensor", "Core", "Mac",
         "systemd", "docker", "cron", "chrony", "sbatch", "sacct", "Elapsed", "MaxRSS",
         "getrusage", "pip", "uv", "flash-attn", "sdpa", "eager", "autocast", "Accelerate",
         "Megatron", "Megatron-LM", "Bridge", "arXiv", "Asia", "Seoul", "Europe", "UTC",
         "localhost", "IANA", "tz", "PCIe", "Ctrl-C", "doctor", "x-oauth-scopes", "ROCm",
         "Apple", "FlashAttention-2", "FlashAttention-3", "root", "uid", "ps", "chown",
         # file names and extensions the compatibility check reads (docs/compat.md)
         "requirements", "txt", "py", "cu", "cuh",
         # the tool that fetches a repository for `/plan NAME check`, and a URL scheme it takes
         "git", "ssh"}
# The phases of a trial, named as its report, chart and recipes name them.
PHASES = {"setup", "launch", "weights", "warmup", "data", "run", "prefill", "decode",
          "generate", "teardown"}
# Words the user types or configures: sub-commands, block kinds, settings and their
# values, an actual's parts, workloads, their parameters and values, the digest's words,
# the permissions of the access settings, the worker's --executor values.
COMMAND_WORDS = ({e.name for e in TRIAL_TABLE} | {e.word for e in PLAN_TABLE}
                 | set(spec.WORKLOADS) | {p.name for w in spec.WORKLOADS.values()
                                          for p in w.params}
                 | {c for w in spec.WORKLOADS.values() for p in w.params for c in p.choices}
                 | set(plans.BLOCK_KINDS) | set(plans.ACTIONS) | set(plans.SETTINGS)
                 | set(plans.CHECKLIST) | set(prices.KINDS) | {"recipe"}
                 | {v for values in plans.CHOICES.values() for v in values}
                 | set(COMPONENTS) | set(digestparse.WEEKDAYS) | {"weekly", "now", "off"}
                 | {"run", "admin", "local", "slurm"}
                 # a recipe file's keys and their values (worker/recipes.py)
                 | recipes.RECIPE_KEYS | recipes.PARAM_KEYS | recipes.PARAM_TYPES
                 | set(recipes.UNITS) | set(environment.TORCH_MODES) | {"cuda", "any"})
ALLOWED = UNITS | NAMES | PHASES | COMMAND_WORDS

BACKTICKED = re.compile(r"`[^`]*`")
PERCENT = re.compile(r"%(?:\([a-z_]+\))?[rsd]")  # argparse's own placeholders: %(prog)s, %s
EMOJI = re.compile(r":[a-z0-9_+-]+:")  # Slack's :warning:
SLACK_REF = re.compile(r"<[#@!][^>]*>|<https?://[^>]*>|https?://\S*")
# Literal text named as it is written: a docs section ("Who may do what"), a recipe's
# key (unit = "program"), a config file's [section].
LITERAL = re.compile(r'\.md, "[^"]+"|\b[a-z_]+ = (?:"[^"]*"|\S+)|\[[a-z_]+\]')
WORD = re.compile(r"(?<![0-9A-Za-z])[-/]*[A-Za-z](?:[A-Za-z0-9_.+/=@:'-]*[A-Za-z0-9_=-])?")
# 해요체 and 해체 endings; requests are …십시오, statements …습니다/…ㅂ니다.
POLITENESS = re.compile(r"(세요|해요|에요|예요|[어아여]요|지요|네요|군요|가요|나요|까요|죠|래요)"
                        r"(?=[\s.!?,):;\"'”]|$)")
COUNTERS = re.compile(r"\d+\s+(개|일|회|번|건|명|주|개월|시간|분|초|배|년|줄|자)(?![가-힣])")
PER_AFTER = re.compile(r"\d(?:[.,]\d+)*\s*(?:[A-Za-z%/-]+\s+)?(?!해당|담당)"
                       r"[가-힣A-Za-z-]+당(?![가-힣])")


class Neutral:
    """A placeholder's value that fits every format spec and adds no word: `7`."""

    def __format__(self, spec: str) -> str:
        return "7"

    def __str__(self) -> str:
        return "7"

    __repr__ = __str__


class Values(dict):
    def __missing__(self, key):
        return Neutral()


def _code(word: str) -> bool:
    """A word that is code or an id, in any language: T12, bf16, TRIALBOT_LANG,
    --token-file, docs/i18n.md, key=value, xoxb-, usergroups:read, GPU."""
    return (any(c.isdigit() for c in word) or any(c in word for c in "_=/:")
            or word.startswith("-") or word.endswith("-") or (word.isupper() and len(word) > 1)
            or len(word) == 1 or "." in word.strip(".")
            or word in ALLOWED or word.rstrip(".:'") in ALLOWED)


def english_words(text: str) -> list[str]:
    text = PERCENT.sub(" ", BACKTICKED.sub(" ", text))
    text = LITERAL.sub(" ", SLACK_REF.sub(" ", EMOJI.sub(" ", text)))
    return [w for w in WORD.findall(text) if not _code(w)]


def rendered() -> list[tuple[str, str]]:
    """(msgid, its Korean) for every message the source marks, through `_` itself."""
    out = []
    with i18n.using("ko"):
        for message in catalogs.template():
            if not message.id:
                continue
            english = catalogs.strings(message.id)
            if len(english) > 1:
                text = i18n.catalog("ko").ngettext(english[0], english[1], 7)
            elif message.context:
                text = i18n.catalog("ko").pgettext(message.context, english[0])
            else:
                text = i18n.catalog("ko").gettext(english[0])
            out.append((english[0], text.format_map(Values())))
    return out


@pytest.fixture(scope="module")
def korean():
    messages = rendered()
    print(f"\n{len(messages)} catalog messages rendered in Korean")
    return messages


def test_every_message_is_rendered(korean):
    marked = [m for m in catalogs.template() if m.id]
    assert len(korean) == len(marked) > 1000


def test_no_english_word_outside_code_names_and_units(korean):
    found = [f"{sorted(set(words))}: {text!r}" for _, text in korean
             if (words := english_words(text))]
    assert found == [], f"{len(found)} messages:\n" + "\n".join(found)


def test_one_politeness_level(korean):
    found = [text for _, text in korean if POLITENESS.search(BACKTICKED.sub(" ", text))]
    assert found == [], f"{len(found)} messages:\n" + "\n".join(found)


def test_counters_stand_against_their_number(korean):
    found = [text for _, text in korean if COUNTERS.search(BACKTICKED.sub(" ", text))]
    assert found == [], f"{len(found)} messages:\n" + "\n".join(found)


def test_per_comes_before_the_figure(korean):
    found = [text for _, text in korean if PER_AFTER.search(BACKTICKED.sub(" ", text))]
    assert found == [], f"{len(found)} messages:\n" + "\n".join(found)


@pytest.mark.parametrize("text, words", [
    ("구간 없음: a model-scaled time has its spread", ["model-scaled", "time", "has", "its",
                                                    "spread"]),
    ("매주 Mon 09:00", ["Mon"]),
    ("H100-80GB 임대 GPU-시간당 2.49, `/plan price` T12 TRIALBOT_LANG --token-file", []),
])
def test_the_rules_find_english(text, words):
    assert english_words(text) == words


# One Korean word for each of the bot's own terms (docs/i18n.md, "Glossary"):
# the term, then the words a translator might reach for instead.
GLOSSARY = {"트라이얼": ("시험", "시행"), "계획": ("플랜",), "워커": ("작업자",)}


def test_each_term_has_one_korean_word(korean):
    found = [f"{word} (write {term}): {text!r}" for _, text in korean
             for term, others in GLOSSARY.items() for word in others if word in text]
    assert found == [], f"{len(found)} messages:\n" + "\n".join(found)
