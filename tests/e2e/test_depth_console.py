"""A depth sweep through `trialbot console`: real trials, the fit and its answers (the
rest of partial depth: tests/unit/test_depth.py)."""
import json


def test_a_depth_sweep_through_the_console_runs_real_trials_and_answers(tmp_path):
    from test_console import run_console
    done = run_console(tmp_path, [
        "/trial sweep llm-infer layers=1,2,3 hidden=64 heads=2 kv_heads=1 vocab=256 gen=4 "
        "repeats=2 stability=0 run_cap=1 malloc=live processes=1",  # one pass a trial
        "/trial fit S1 layers=12 gpu=L4",
        "/trial fit S1 batch=4"], "--json")
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    reports_ = [m for m in out if " llm-infer ok on " in m["text"] and not m.get("update")]
    assert len(reports_) == 3
    (fit,) = [m for m in out if m["text"].startswith(":straight_ruler: *Depth sweep S1*")
              and "channel" in m]
    assert "Peak memory — host_rss_peak" in fit["text"] and "held out T3 at 3 layers" in fit["text"]
    assert "no full depth to predict" in fit["text"]          # no preset: ask for a depth
    answer, drawn, refused = out[-3:]  # the asked prediction's chart before the next line
    assert answer["response_type"] == "ephemeral" and "Predicted at 12 layers" in answer["text"]
    assert drawn["file"].endswith("S1-fit-layers12.png")
    assert "lower bound" in answer["text"] and "\nL4 " in answer["text"]
    assert "\nA10 " not in answer["text"]                    # the GPU asked about only
    assert refused["text"].startswith(":x: `batch=4`")
