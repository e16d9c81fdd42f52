#!/usr/bin/env python3
"""Issue 30's build-time target: the paper-like fixture of
tests/integration/test_recipe_env.py (a git repository pinning torch==2.0.1,
transformers 4.40.2 and filelock 3.12.0) built as a recipe environment by the worker, on this
machine. Three figures, each the trial's `setup` phase (fetch + build):

  cold, empty uv cache   a new box: every wheel downloaded from the registry
  cold, warm uv cache    a new environment whose wheels uv has seen before
  cached                 the same recipe again: the environment reused

Each repeat uses a fresh environment cache (and, for the first, a fresh
UV_CACHE_DIR); the figures are medians with their range.

    python scripts/bench_env_build.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

from test_recipe_env import paper_fixture  # noqa: E402
from worker import launcher, recipes  # noqa: E402
from worker.spec import parse  # noqa: E402


def setup_seconds(path: str, cache: str) -> float:
    book = recipes.load(path, env_cache=cache)
    r = launcher.run_trial(parse(["recipe", "paper"], {"paper": book["paper"].workload()}),
                           recipes=book)
    assert r["status"] == "ok", r.get("error")
    return next(p["seconds"] for p in r["phases"] if p["found_by"] == "recipe-environment")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = {"cold, empty uv cache": [], "cold, warm uv cache": [], "cached": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        path = paper_fixture(tmp_path)[0]
        for i in range(args.repeats):
            os.environ["UV_CACHE_DIR"] = str(tmp_path / f"uv-{i}")
            rows["cold, empty uv cache"].append(setup_seconds(path, str(tmp_path / f"a{i}")))
            rows["cold, warm uv cache"].append(setup_seconds(path, str(tmp_path / f"b{i}")))
            rows["cached"].append(setup_seconds(path, str(tmp_path / f"b{i}")))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.repeats} repeats; setup phase, s")
    for name, xs in rows.items():
        print(f"{name:24} median {statistics.median(xs):7.2f}  range {min(xs):.2f}-{max(xs):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
