"""`/plan NAME check` on a worker (#34): the repository fetched at its commit
into the clone cache, as a recipe's is (worker/launcher/envbuild.py), and
read without running it (worker/compat/), and its pins resolved by uv for
this worker's Python on x86-64 Linux, where GPUs are rented (worker/compat/
resolve.py; nothing installed or built). Nothing from the repository is
executed: git fetches and checks out, the reader parses.

The answer is the bot's to word (in the channel's language): a report
(`trialbot.compat/1`) with the commit read and the seconds each step took,
or `error` {why, message}: why is fetch, commit, timeout or unreadable.

A repository on this machine's own disk (a path, `file://`) is read only
where the worker's operator allows it (TRIALBOT_CHECK_LOCAL=1, which
`trialbot console` sets for its own worker): a Slack user may ask for a
check, and must not make a shared worker read its folders. Checks keep
their own clone cache (`checks/` under the recipes' one), so a file a
recipe's trial wrote into its tree is never read as the repository's."""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import time

from worker import compat, environment
from worker.compat import resolve
from worker.launcher import envbuild

FETCH_SECONDS = 300.0  # a clone of a large repository; well inside the check's lease
LINUX = "x86_64-unknown-linux-gnu"  # a rented GPU box's platform, in uv's words
LOCAL = "TRIALBOT_CHECK_LOCAL"  # "1": this worker may read repositories on its own disk
HASH = re.compile(r"[0-9a-fA-F]{7,40}")  # a commit that does not move (a branch or tag may)

log = logging.getLogger("trialbot.worker")


def local(repo: str) -> bool:
    return environment.is_local(repo) or repo.startswith("file:")


def run(repo: str, commit: str | None, cache: str | None = None,
        seconds: float = FETCH_SECONDS) -> dict:
    start = time.monotonic()
    if local(repo) and os.environ.get(LOCAL) != "1":
        return {"repo": repo, "error": {"why": "fetch", "message": (
            f"this worker reads repositories on its own disk only when its operator "
            f"allows it ({LOCAL}=1); give the repository's URL")}}
    try:
        tree, full, cached = envbuild.checkout(
            repo, commit or "HEAD", os.path.join(cache or environment.default_cache(), "checks"),
            seconds, refresh=commit is None or not HASH.fullmatch(commit))
    except envbuild.FetchFailed as exc:
        return {"repo": repo, "error": {"why": exc.why, "message": exc.message[-2000:]}}
    fetched = time.monotonic()
    try:
        report = compat.read(tree)
        read = time.monotonic()
        target = resolve.Target(resolve.default_target().python, LINUX)
        done = resolve.check(report, target, environment.uv_binary()) if report.pins else None
    except Exception as exc:  # a reader's bug on one repository must not stop the worker
        log.exception("check of %s at %s failed in the reader", repo, full)
        return {"repo": repo, "commit": full, "error": {"why": "unreadable", "message": (
            f"the reader failed on this repository ({type(exc).__name__}: {exc}); the "
            "worker's log has the traceback")[:2000]}}
    # The worker's cache path means nothing to the reader of the answer.
    report = dataclasses.replace(report, root=repo, resolution=done)
    return {"repo": repo, "commit": full, "cached": cached,
            "fetch_s": round(fetched - start, 3), "read_s": round(read - fetched, 3),
            "resolve_s": round(time.monotonic() - read, 3), "report": report.as_json()}
