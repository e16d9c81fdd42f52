"""`/plan NAME check` on a worker (#34): the repository fetched at its commit
into the clone cache, as a recipe's is (worker/launcher/envbuild.py), and
read without running it (worker/compat/), and its pins resolved by uv for
this worker's Python on x86-64 Linux, where GPUs are rented (worker/compat/
resolve.py; nothing installed or built). Nothing from the repository is
executed: git fetches and checks out, the reader parses.

The answer is the bot's to word (in the channel's language): a report
(`trialbot.compat/1`) with the commit read and the seconds each step took,
or `error` {why, message}: why is fetch, commit, timeout or unreadable."""
from __future__ import annotations

import dataclasses
import time

from worker import compat, environment
from worker.compat import resolve
from worker.launcher import envbuild

FETCH_SECONDS = 300.0  # a clone of a large repository; well inside the check's lease
LINUX = "x86_64-unknown-linux-gnu"  # a rented GPU box's platform, in uv's words


def run(repo: str, commit: str | None, cache: str | None = None,
        seconds: float = FETCH_SECONDS) -> dict:
    start = time.monotonic()
    try:
        tree, full, cached = envbuild.checkout(repo, commit or "HEAD",
                                               cache or environment.default_cache(), seconds,
                                               refresh=commit is None)
    except envbuild.FetchFailed as exc:
        return {"repo": repo, "error": {"why": exc.why, "message": exc.message[-2000:]}}
    fetched = time.monotonic()
    try:
        report = compat.read(tree)
    except compat.CheckError as exc:  # the checkout is gone or not a folder
        return {"repo": repo, "commit": full,
                "error": {"why": "unreadable", "message": str(exc)}}
    read = time.monotonic()
    target = resolve.Target(resolve.default_target().python, LINUX)
    done = resolve.check(report, target, environment.uv_binary()) if report.pins else None
    # The worker's cache path means nothing to the reader of the answer.
    report = dataclasses.replace(report, root=repo, resolution=done)
    return {"repo": repo, "commit": full, "cached": cached,
            "fetch_s": round(fetched - start, 3), "read_s": round(read - fetched, 3),
            "resolve_s": round(time.monotonic() - read, 3), "report": report.as_json()}
