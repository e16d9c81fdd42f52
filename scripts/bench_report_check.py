"""What the bot's checks of a posted report cost: the strict JSON parse (no NaN
or Infinity, bot/http/server.py) against plain json.loads, and
worker/report.py's validate, on a report as large as a real one gets (both
timeline parts at their 2000-row cap, 64 logits, two passes, five windows).

    python scripts/bench_report_check.py [--repeat 50]

Prints the body's size and the mean of each over --repeat runs; exits 1 if
the report is not valid (the check must pass an honest report).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from worker import report as reports  # noqa: E402
from worker import shape, timeline  # noqa: E402
from worker.spec import parse  # noqa: E402

T = 1_790_000_000.0


def big_report() -> dict:
    params = parse(["llm-infer"]).params
    r = reports.new_report("llm-infer", params)
    stats = {"p50": 0.1, "p90": 0.12, "p99": 0.13, "mean": 0.11, "stdev": 0.01, "count": 500,
             "unit": "s", "what": "one request"}
    samples = [{"t": T + i * 0.01, "host_rss": 1e9 + i, "device_used": 2e9 + i,
                "process_used": 3e9, "allocated": 1.5e9 + i, "reserved": 2.5e9}
               for i in range(40000)]
    r.update(
        status="ok", started=T, finished=T + 400, seconds=400.0, requested=dict(params),
        phases=[{"name": n, "start": T + i, "end": T + i + 1, "seconds": 1.0}
                for i, n in enumerate(("setup", "weights", "data", "warmup", "run"))],
        latency=stats, ttft=dict(stats), decode_per_token=dict(stats),
        throughput={"value": 320.5, "unit": "tokens/s", "what": "x"},
        headline={"metric": "throughput", "value": 320.5, "unit": "tokens/s"},
        stability={"count": 500, "iqr_over_median": 0.02, "threshold": 0.05,
                   "stopped_by": "stable", "seconds": 55.0, "stable": True},
        windows={"unit": "request", "what": "x", "rows": [
            {"start": T + i, "end": T + i + 1, "count": 100, "mean": 0.11, "sd": 0.01,
             "others_cpu": 0.1, "contended": False} for i in range(5)]},
        quality_probe={"first_tokens": [5], "logits_head": [0.1] * 64, "logits_sd": 0.5,
                       "what": "x"},
        attempts=[{"attempt": 1, "status": "ok", "error_class": None, "message": "",
                   "seconds": 400.0, "changed": {}, "next": None}],
        seconds_lost=0.0, timeline=timeline.build(samples, samples),
        passes=[{"pass": p, "malloc": m, "status": "ok", "seconds": 200.0, "params": {},
                 "supplied": [], "host_rss_peak": 10**9}
                for p, m in (("memory", "live"), ("time", "glibc"))])
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    r = big_report()
    spec = {"workload": "llm-infer", "params": r["params"]}
    raw = json.dumps({"worker": "w1", "lease": "x", "report": r}).encode()
    timed = {}
    for name, call in (("plain json.loads", lambda: json.loads(raw)),
                       ("strict parse (worker/shape.loads)", lambda: shape.loads(raw)),
                       ("validate (worker/report.py)", lambda: reports.validate(r, spec))):
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            out = call()
        timed[name] = (time.perf_counter() - t0) / args.repeat
    rows = sum(len(p["rows"]) for p in r["timeline"].values())
    print(f"report body {len(raw) / 1024:.0f} KiB, {rows} timeline rows")
    for name, seconds in timed.items():
        print(f"{name}: {seconds * 1e3:.2f} ms (mean of {args.repeat})")
    if out:
        print(f"FAIL: the honest report is refused: {out}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
