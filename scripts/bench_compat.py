#!/usr/bin/env python3
"""The compatibility check on real checkouts (docs/compat.md#the-truth-table).

    python scripts/bench_compat.py PATH [PATH ...] [--all] [--runs N]

For each repository: the reader's time for a first read and the median and
range of N repeats (default 3; its files then in the OS page cache, the reader
keeps no cache of its own), the Python files and needs it found, and the
verdicts for a T4, an A100, an H100 and a Mac (`--all`: every kind of the GPU
table, and a CPU). A path that does not exist is said and skipped, so the truth
table's nine checkouts can be given whether or not they are all present.
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


def main(argv: list[str]) -> int:
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
