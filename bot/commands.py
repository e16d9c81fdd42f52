"""Parsing of `/trial` text into a command. Pure: no Slack, no SQL, no clock."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from worker import spec as specs

USAGE = specs.general_usage()


@dataclass(frozen=True)
class Command:
    name: str  # "help" | "status" | "list" | "run"
    job_id: int | None = None
    spec: specs.TrialSpec | None = None


def split(text: str) -> list[str]:
    try:
        return shlex.split(text or "")
    except ValueError as exc:  # an unclosed quote
        raise specs.SpecError(text, f"could not read `{text}`: {exc}", USAGE) from None


def parse_trial(text: str, recipes: dict | None = None) -> Command:
    words = split(text)
    if not words or words[0] == "help":
        return Command("help")
    head, rest = words[0], words[1:]
    if head == "status":
        if len(rest) != 1:
            raise specs.SpecError(" ".join(words), "`/trial status` takes one trial id, "
                                  "e.g. `/trial status T12`", USAGE)
        return Command("status", job_id=parse_trial_id(rest[0]))
    if head == "list":
        if rest:
            raise specs.SpecError(rest[0], f"`{rest[0]}`: `/trial list` takes no "
                                  "arguments yet", USAGE)
        return Command("list")
    return Command("run", spec=specs.parse(words, recipes))


def parse_trial_id(word: str) -> int:
    m = re.fullmatch(r"[Tt]?(\d{1,12})", word)
    if not m:
        raise specs.SpecError(word, f"`{word}` is not a trial id; trial ids look like T12",
                              USAGE)
    return int(m.group(1))
