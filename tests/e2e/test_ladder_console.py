"""One whole ladder through `trialbot console` on a tiny model (the steps, table and
recommendation: tests/unit/test_ladder.py)."""
from bot.trials import ladder
from test_console import run_console
from test_ladder import TINY


def test_a_whole_ladder_on_a_tiny_model_through_the_console(tmp_path):
    # one pass per step (malloc=glibc): the two-pass default is tests/test_passes.py's
    done = run_console(tmp_path, [f"/trial ladder {TINY} malloc=glibc budget=100MB"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Queued ladder *L1*" in out and out.count("*Ladder L1*") == 1
    for step in ladder.STEPS:
        assert f"\n{step} " in out
    assert "ZeRO-1 over 2 ranks" in out and "Recommendation" in out
    assert "Nothing fits 95.4 MiB" in out  # host RSS of a torch process is above that
    assert "Recommended configuration: precision=" in out
