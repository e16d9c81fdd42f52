"""`/plan NAME check` on a worker (#34): the repository fetched at its commit
into the clone cache, as a recipe's is (worker/launcher/envbuild.py), and
read without running it (worker/compat/). Nothing from the repository is
executed: git fetches and checks out, the reader parses.

The answer is the bot's to word (in the channel's language): a report
(`trialbot.compat/1`) with the commit read and the seconds each step took,
or `error` {why, message}: why is fetch, commit, timeout or unreadable."""
from __future__ import annotations

import dataclasses
import time

from worker import compat, environment
from worker.launcher import envbuild

FETCH_SECONDS = 300.0  # a clone of a large repository; well inside the check's lease


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
    # The worker's cache path means nothing to the reader of the answer.
    report = dataclasses.replace(report, root=repo)
    return {"repo": repo, "commit": full, "cached": cached,
            "fetch_s": round(fetched - start, 3),
            "read_s": round(time.monotonic() - fetched, 3), "report": report.as_json()}
