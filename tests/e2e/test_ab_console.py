"""One A/B through `trialbot console` (the pure parts: tests/unit/test_ab.py)."""
from test_console import run_console


def test_an_ab_of_inference_precision_through_the_console(tmp_path):
    done = run_console(tmp_path, ["/trial ab llm-infer dtype=fp32,fp16 layers=1 hidden=64 "
                                  "heads=2 kv_heads=1 vocab=256 gen=2 repeats=4 stability=0 "
                                  "processes=1 rounds=2 malloc=glibc"])  # one pass a trial
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("*A/B*") == 1 and "Queued an A/B of 2 rounds" in done.stdout
    assert "time per request" in done.stdout and "quality held" in done.stdout
    # a verdict with its interval, or (on a busy machine) why none is given
    assert " t interval ×" in done.stdout or "no verdict: " in done.stdout
