"""A report from a real llm-infer child process carries a judged block (the types and
validator: tests/unit/test_report.py)."""
from worker import launcher
from worker.spec import parse


def test_llm_infer_with_stability_0_reports_a_judged_block():
    r = launcher.run_trial(parse(["llm-infer", "gen=2", "repeats=3", "stability=0", "layers=1",
                                  "processes=1",
                                  "hidden=64", "heads=2", "kv_heads=1", "vocab=256"]))
    assert r["status"] == "ok", r.get("error")
    st = r["stability"]
    assert st["count"] == 3 and st["threshold"] is None and st["bound"] == 0.05
    assert st["stable"] == (st["iqr_over_median"] < 0.05)
