"""One sweep through `trialbot console` (parsing and the fit posted once:
tests/unit/test_sweep.py)."""
import json

from test_console import run_console


def test_sweep_through_the_console_posts_the_fit_once(tmp_path):
    done = run_console(tmp_path, [
        "/trial sweep llm-infer batch=1,2,3 gen=4 layers=1 hidden=64 heads=2 kv_heads=1 "
        "vocab=256 repeats=2 stability=0 run_cap=1 malloc=live processes=1",  # one pass a trial
        "/trial fit S1 batch=12 gpu=L4"], "--json")
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert "Queued sweep *S1*: T1–T3" in out[0]["text"]
    reports_ = [m for m in out if " llm-infer ok on " in m["text"] and not m.get("update")]
    assert len(reports_) == 3
    fits = [m for m in out if m["text"].startswith(":chart_with_upwards_trend: *Sweep S1*")
            and "channel" in m]
    assert len(fits) == 1 and "Peak memory — host_rss_peak" in fits[0]["text"]
    assert out.index(fits[0]) > out.index(reports_[-1])
    # stability=0 is still judged
    assert all("over a fixed 2 requests" in m["text"] for m in reports_)
    assert "contention not measured" not in fits[0]["text"]  # every trial measures it now
    answer, drawn = out[-2:]  # the chart is printed before the next line is read
    assert answer["response_type"] == "ephemeral" and "batch=12" in answer["text"]
    assert "S1-fit-batch12.png) is being uploaded to this channel" in answer["text"]
    assert drawn["file"].endswith("S1-fit-batch12.png") and "batch=12" in drawn["text"]
    with open(drawn["file"], "rb") as f:
        assert f.read(4) == b"\x89PNG"
    charts = [m for m in out if str(m.get("file", "")).endswith("S1-fit.png")]
    assert len(charts) == 1 and out.index(charts[0]) == out.index(fits[0]) + 1
    assert "L4: 24 GB GDDR6" in answer["text"] and "host RSS only" in answer["text"]
