"""Host memory per phase on any device: each phase's peak from the worker's
sampled RSS of the trial's process tree, and the share of the trial's peak
already held before the program's own work. Real child processes on the CPU."""
import textwrap

import pytest

from worker import arithmetic, i18n, launcher, recipes, summary, timeline
from worker import report as reports
from worker.spec import parse

MiB = 2**20

# prep holds 1 MiB; run holds 200 MiB (every page written) for 0.5 s. The worker
# timestamps a mark when it reads the line: the program waits 0.1 s after it, so
# a loaded box's late read cannot put run's first pages in prep (CI saw 1.2 MiB).
PROGRAM = """
import time
print("TRIALBOT_PHASE prep", flush=True)
small = bytearray(b"p") * (1 << 20)
time.sleep(0.3)
print("TRIALBOT_PHASE run", flush=True)
time.sleep(0.1)
big = bytearray(b"x") * (200 << 20)
time.sleep(0.5)
del big
"""


def by_name(r: dict) -> dict:
    return {p["name"]: p for p in r["phases"]}


def test_a_recipe_phase_holding_200_MiB_peaks_that_much_above_its_prep(tmp_path):
    (tmp_path / "alloc.py").write_text(PROGRAM)
    (tmp_path / "recipes.toml").write_text(textwrap.dedent(f"""
        [recipes.alloc]
        cwd = "{tmp_path}"
        argv = ["{{python}}", "alloc.py"]
        timeout = "1m"
        """))
    book = recipes.load(str(tmp_path / "recipes.toml"))
    r = launcher.run_trial(parse(["recipe", "alloc"], {"alloc": book["alloc"].workload()}),
                           recipes=book)
    assert r["status"] == "ok", r["error"]
    assert reports.validate(r) == []
    phases = by_name(r)
    assert list(phases) == ["launch", "prep", "run"]
    assert all(p["host_rss_samples"] > 0 for p in phases.values())
    assert phases["run"]["host_rss_peak"] - phases["prep"]["host_rss_peak"] >= 200 * MiB
    sampled = r["timeline"]["sampled"]
    column = sampled["columns"].index("host_rss")
    top = max(row[column] or 0 for row in sampled["rows"])
    # The run phase holds the largest sample; the trial's peak is the kernel's (it
    # ran alone), a few pages from it either way.
    assert phases["run"]["host_rss_peak"] == top
    assert abs(r["memory"]["host_rss_peak"] - top) < MiB
    # launch: the interpreter before the first mark, a small share of the same samples
    share = r["memory"]["host_rss_launch_share"]
    assert share == phases["launch"]["host_rss_peak"] / top
    assert 0 < share < 0.2
    method = r["memory"]["method"]
    assert "sampled at 100 Hz" in method["phase_host_rss_peak"]
    assert "shorter than the 10 ms interval" in method["phase_host_rss_peak"]
    assert "`launch` phase" in method["host_rss_launch_share"]
    line = summary.phases_line(r)
    assert f"(host RSS peak {summary.size(phases['run']['host_rss_peak'])})" in line
    assert f"launch (interpreter start and imports) already held {share:.0%}" in line


def test_a_built_in_trials_weights_phase_peaks_its_weights_above_setup():
    # malloc=auto on a CPU: the peaks are the memory pass's (malloc=live), by phase name
    r = launcher.run_trial(parse(["llm-infer", "layers=2", "hidden=512", "heads=4",
                                  "kv_heads=2", "vocab=32000", "prompt=8", "gen=2",
                                  "repeats=2", "stability=0", "warmup=1", "device=cpu",
                                  "processes=1"]))
    assert r["status"] == "ok", r["error"]
    assert reports.validate(r) == []
    phases = by_name(r)
    weights = arithmetic.weight_bytes(r["params"])
    assert weights > 100 * MiB
    # The weights are written through the weights phase, so its peak is at its very
    # end, where a sampler starved by a busy machine may have no sample; the run
    # phase holds them throughout.
    assert phases["weights"]["host_rss_peak"] > phases["setup"]["host_rss_peak"]
    assert phases["run"]["host_rss_peak"] - phases["setup"]["host_rss_peak"] >= weights
    assert phases["warmup"]["host_rss_peak"] is None  # the memory pass runs no warmup
    method = r["memory"]["method"]
    assert method["phase_host_rss_peak"].startswith("memory pass under malloc=live")
    assert "phase_host_rss_peak" in r["passes"][0]["supplied"]
    # setup imports torch: its share of the trial's peak is stated, from the same pass
    share = r["memory"]["host_rss_launch_share"]
    peaks = [p["host_rss_peak"] for p in phases.values() if p["host_rss_peak"]]
    assert share == pytest.approx(phases["setup"]["host_rss_peak"] / max(peaks), rel=0.01)
    assert 0 < share < 1 and "`setup` phase" in method["host_rss_launch_share"]
    assert "setup (interpreter start and imports) already held" in summary.phases_line(r)


def test_a_phase_between_two_samples_has_no_peak_and_says_so():
    rows = [{"t": 10.0, "host_rss": 5}, {"t": 10.01, "host_rss": 9}, {"t": 10.02, "host_rss": 7}]
    phases = [{"name": "a", "start": 10.0, "end": 10.015},
              {"name": "b", "start": 10.0151, "end": 10.0159},  # shorter than the interval
              {"name": "c", "start": 10.016, "end": 10.03}]
    assert timeline.phase_host_peaks(phases, rows) == [(9, 2), (None, 0), (7, 1)]
    r = dict(reports.new_report("recipe", {}), status="ok",
             phases=[dict(p, seconds=p["end"] - p["start"]) for p in phases])
    r["memory"]["host_rss_peak"] = 9
    timeline.host_by_phase(r, rows, 100)
    assert "b 800 µs (host RSS peak not measured)" in summary.phases_line(r)
    with i18n.using("ko"):
        assert "a 15 ms (호스트 RSS 최대치 9 B)" in summary.phases_line(r)
    assert r["memory"]["host_rss_launch_share"] is None  # no launch or setup phase
    assert "not measured: no launch or setup phase" in r["memory"]["method"][
        "host_rss_launch_share"]
    assert reports.validate(r) == []


@pytest.mark.parametrize("where, value, says", [
    ("phase", -1, "`report.phases[0].host_rss_peak` is -1: must be bytes from 0 to 1 PiB"),
    ("phase", 2**51, "`report.phases[0].host_rss_peak`"),
    ("share", 1.5, "`report.memory.host_rss_launch_share` is 1.5: must be a share from 0 to 1"),
    ("share", -0.1, "`report.memory.host_rss_launch_share`"),
])
def test_a_host_peak_or_share_that_cannot_be_measured_is_refused(where, value, says):
    r = dict(reports.new_report("recipe", {}), status="ok",
             phases=[{"name": "run", "seconds": 1.0, "host_rss_peak": 1, "host_rss_samples": 1}])
    if where == "phase":
        r["phases"][0]["host_rss_peak"] = value
    else:
        r["memory"]["host_rss_launch_share"] = value
    assert says in " ".join(reports.validate(r))
