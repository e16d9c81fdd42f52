#!/usr/bin/env python3
"""The compatibility check on real checkouts (docs/compat.md#the-truth-table).

    python scripts/bench_compat.py PATH [PATH ...] [--all] [--runs N]
    python scripts/bench_compat.py --worker REPO [COMMIT]

For each repository: the reader's time for a first read and the median and
range of N repeats (default 3; its files then in the OS page cache, the reader
keeps no cache of its own), the Python files and needs it found, and the
verdicts for a T4, an A100, an H100 and a Mac (`--all`: every kind of the GPU
table, and a CPU). A path that does not exist is said and skipped, so the truth
table's nine checkouts can be given whether or not they are all present.

`--worker`: one `/plan NAME check` through the worker path, twice: a bot on
loopback (a temporary database), a worker agent leasing the check through the
worker API, fetching REPO (a URL, or a git directory on this machine) at
COMMIT into a fresh clone cache and reading it, and the answer recorded and
posted. Printed: the time from `/plan` to the stored answer, cold (an empty
clone cache) and cached (the same commit again), with the worker's own fetch
and read seconds, and the seconds uv took to resolve its pins for the worker's
Python on x86-64 Linux against the package index it reaches.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.fits import compat  # noqa: E402
from worker import compat as reader  # noqa: E402

KINDS = ("T4", "A100-80GB", "H100", "mac")


def timed(path: str) -> tuple[reader.Report, float]:
    start = time.perf_counter()
    report = reader.read(path)
    return report, time.perf_counter() - start


def through_worker(repo: str, commit: str | None) -> int:
    """Bot and worker in this process, as `trialbot console` runs them."""
    import datetime as dt
    import io
    import os
    import tempfile
    import threading

    from bot import commands
    from bot.access import Policy
    from bot.app.console import ConsoleTransport
    from bot.app.runtime import Runtime
    from worker.agent import Agent
    from worker.client import Client

    tmp = tempfile.mkdtemp(prefix="bench-compat-")
    os.environ["TRIALBOT_ENV_CACHE"] = os.path.join(tmp, "cache")  # cold: an empty cache
    os.environ["TRIALBOT_CHECK_LOCAL"] = "1"  # REPO may be a git directory on this machine
    rt = Runtime(os.path.join(tmp, "a.db"), "tok", ConsoleTransport(io.StringIO(), True, tmp),
                 policy=Policy(run_everyone=True))
    rt.start()
    agent = Agent(Client(rt.server.url, "tok"), "bench")
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    try:
        while not rt.store.workers():
            time.sleep(0.05)
        today = dt.date.today()
        commands.plan(rt.ctx, "new bench gpu=H100", "U1", "C1", today)
        words = f"bench check repo={repo}" + (f" commit={commit}" if commit else "")
        for n, label in ((1, "cold"), (2, "cached")):
            start = time.perf_counter()
            commands.plan(rt.ctx, words, "U1", "C1", today)
            while rt.store.check(n)["status"] in ("queued", "running"):
                time.sleep(0.01)
            took, check = time.perf_counter() - start, rt.store.check(n)
            result = check["result"]
            if "error" in result:
                print(f"{label}: {result['error']['why']}: {result['error']['message']}")
                return 1
            print(f"{label}: {took:.2f} s from /plan to the stored answer (worker: fetch "
                  f"{result['fetch_s']:.2f} s, read {result['read_s']:.2f} s, pins resolved "
                  f"{result.get('resolve_s', 0):.2f} s, cached {result['cached']}); "
                  f"{result['report']['python_files']} Python files at {result['commit'][:12]}")
    finally:
        agent.stop()
        rt.stop()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"] and len(argv) in (2, 3):
        return through_worker(argv[1], argv[2] if len(argv) == 3 else None)
    every = "--all" in argv
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 3
    paths = [a for i, a in enumerate(argv) if a not in ("--all", "--runs")
             and (i == 0 or argv[i - 1] != "--runs")]
    if not paths or runs < 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    kinds = None if every else tuple(compat.target(k) for k in KINDS)
    for path in paths:
        if not Path(path).is_dir():
            print(f"{path}: not here, skipped")
            continue
        report, first = timed(path)
        again = sorted(timed(path)[1] for _ in range(runs))
        needs = sum(v for k, v in report.counts.items() if not k.endswith(":guarded"))
        print(f"{path}: {report.python_files} Python files, {needs} unguarded needs, "
              f"{len(report.unread)} not read; first read {first:.2f} s, repeats "
              f"median {statistics.median(again):.2f} s ({again[0]:.2f}-{again[-1]:.2f} s, "
              f"{runs} runs)")
        for line in compat.lines(compat.verdicts(report, kinds)):
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
