"""malloc=live in a real child process: glibc's threshold pinned (partial depth
in-process: tests/unit/test_depth.py)."""
from worker import launcher
from worker import spec as specs


def test_a_live_malloc_trial_pins_glibcs_threshold_in_the_child():
    spec = specs.parse(["llm-infer", "layers=1", "hidden=32", "heads=2", "kv_heads=1",
                        "vocab=64", "prompt=8", "gen=2", "repeats=1", "stability=0",
                        "warmup=0", "malloc=live", "device=cpu"])
    r = launcher.run_trial(spec)
    assert r["status"] == "ok", r["error"]
    assert "pinned at 64 KiB (malloc=live)" in r["memory"]["method"]["host_rss_peak"]
