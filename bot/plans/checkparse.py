"""`/plan NAME check [repo=URL_OR_PATH] [commit=SHA]` read, and the repository
and commit a plan's checklist `repo` item names (#34). Pure.

A repository is a URL git fetches (https, http, ssh, git, file, or
`git@host:owner/name`) or an absolute local path, as a recipe's `repo` is;
nothing that git could read as an option (a leading `-`) gets through."""
from __future__ import annotations

import datetime as dt
import re

from bot.plans.grammar import PlanCommand, PlanError, key_values
from bot.states import Json
from worker.i18n import _

URL = re.compile(r"(https?|ssh|git|file)://[^\s<>|'\"`]+")
SCP = re.compile(r"[\w.][\w.-]*@[\w.-]+:[\w./~-]+")
PATH = re.compile(r"/[^\s<>|'\"`]*")
HOSTED = re.compile(r"(github\.com|gitlab\.com|huggingface\.co)/[\w.-]+/[\w.-]+[^\s]*")
HEX = re.compile(r"[0-9a-fA-F]{7,40}")
REF = re.compile(r"[A-Za-z0-9][\w.+-]*(/[\w.+-]+)*")
EXAMPLE = "/plan {plan} check repo=https://github.com/FasterDecoding/Medusa commit=e2a5d20"


def repo_of(raw: str) -> str | None:
    """A repository as git would be given it, or None. Slack's link markup
    (`<https://...|text>`) and a trailing comma are taken off."""
    text = raw.strip().rstrip(",;")
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1].split("|", 1)[0]
    if HOSTED.fullmatch(text):
        text = "https://" + text
    if URL.fullmatch(text) or SCP.fullmatch(text) or PATH.fullmatch(text):
        return text
    return None


def commit_ok(raw: str) -> bool:
    return bool(HEX.fullmatch(raw) or (REF.fullmatch(raw) and ".." not in raw
                                       and len(raw) <= 100))


def parse_check(plan: str | None, word: str, rest: list[str], today: dt.date) -> PlanCommand:
    pairs = key_values(rest, ("repo", "commit"), f"`/plan {plan} check`")
    args: Json = {"repo": None, "commit": None}
    if "repo" in pairs:
        args["repo"] = repo_of(pairs["repo"])
        if args["repo"] is None:
            raise PlanError(_("`repo={repo}` is not a repository git can fetch: give a URL "
                              "(https://, ssh://, git@host:owner/name) or an absolute path on "
                              "the worker, e.g. `{example}`", repo=pairs["repo"],
                              example=EXAMPLE.format(plan=plan)))
    if "commit" in pairs:
        if not commit_ok(pairs["commit"]):
            raise PlanError(_("`commit={commit}` is not a commit: give a commit hash (7 to 40 "
                              "hex digits) or a tag, e.g. `{example}`", commit=pairs["commit"],
                              example=EXAMPLE.format(plan=plan)))
        args["commit"] = pairs["commit"]
    return PlanCommand("check", plan, args)


def from_checklist(item: str | None) -> tuple[str | None, str | None]:
    """The repository and commit the checklist's `repo` item names
    ("https://github.com/o/n @ e2a5d20", "o/n's URL, commit e2a5d20"): the first
    word that is a repository, and a hash after it (or after its `@`)."""
    repo = commit = None
    for word in (item or "").replace(",", " ").split():
        if repo is None:
            head, at, tail = word.rpartition("@") if "://" in word else ("", "", "")
            repo = repo_of(head if at and HEX.fullmatch(tail) else word)
            if repo is not None and at and HEX.fullmatch(tail):
                commit = tail
        elif commit is None and HEX.fullmatch(word.strip("`()")):
            commit = word.strip("`()")
    return repo, commit


def target(args: Json, checklist: str | None, plan: str) -> tuple[str, str | None]:
    """What to check: repo= and commit= as given, else the checklist's."""
    listed, listed_commit = from_checklist(checklist)
    repo = args["repo"] or listed
    if repo is None:
        if checklist:
            raise PlanError(_("Plan {plan}'s checklist `repo` is `{item}`, which names no "
                              "repository git can fetch; give one: `{example}`, or set it: "
                              "`/plan {plan} set repo=\"https://github.com/owner/name @ "
                              "e2a5d20\"`", plan=plan, item=checklist,
                              example=EXAMPLE.format(plan=plan)))
        raise PlanError(_("Plan {plan} has no repository to check: give one, `{example}`, or "
                          "set the checklist's: `/plan {plan} set repo=\"https://github.com/"
                          "owner/name @ e2a5d20\"`", plan=plan, example=EXAMPLE.format(plan=plan)))
    commit = args["commit"] or (listed_commit if args["repo"] in (None, listed) else None)
    return repo, commit
