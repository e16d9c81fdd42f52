"""The trial report's one definition (worker/report.py): the types, and the
validator that checks a posted report against them before the bot stores it."""
import typing

import pytest

from worker import report, spec, stats, summary


def ok():
    return dict(report.new_report("llm-infer", {"batch": 1}), status="ok")


def test_a_new_report_is_valid_once_it_has_a_verdict():
    assert report.validate(ok()) == []
    assert report.validate(report.fail(report.new_report("recipe", {}), "oom", "x")) == []
    assert "`report.status` must be 'ok' or 'failed'" in report.validate(
        report.new_report("x", {}))


def test_memory_fields_are_the_types_memory_fields():
    declared = set(typing.get_type_hints(report.Memory)) - {"method", "devices"}
    assert declared == set(report.MEMORY_FIELDS)


@pytest.mark.parametrize("key, value, says", [
    ("latency", [1, 2], "`report.latency` must be an object or null"),
    ("seconds", "12", "`report.seconds` must be a number or null (got '12')"),
    ("seconds_lost", None, "`report.seconds_lost` must be a number (got None)"),
    ("attempts", {"a": 1}, "`report.attempts` must be a list"),
    ("recipe", 7, "`report.recipe` must be a string or null (got 7)"),
    ("headline", True, "`report.headline` must be an object or null (got True)"),
])
def test_a_field_of_the_wrong_type_is_named(key, value, says):
    assert says in report.validate(dict(ok(), **{key: value}))


@pytest.mark.parametrize("key, value, says", [
    ("env", {"host": 7}, "`report.env.host` must be a string or null (got 7)"),
    ("env", {"environment": {"packages": []}}, "`report.env.environment.packages` must be "
                                               "an object"),
    ("slurm", {"job_id": 5}, "`report.slurm.job_id` must be a string or null (got 5)"),
    ("slurm", {"jobs": [{"state": None}]}, "`report.slurm.jobs[0].state` must be a string "
                                           "(got None)"),
    ("threads", {"chosen_by": "bot"}, "`report.threads.chosen_by` must be one of 'worker', "
                                      "'user' (got 'bot')"),
    ("probe", {"what": 1}, "`report.probe.what` must be a string (got 1)"),
])
def test_the_sections_a_worker_fills_are_checked_key_by_key(key, value, says):
    # worker/reportparts.py: the keys the launcher, Slurm and the probes write, named once
    assert says in report.validate(dict(ok(), **{key: value}))


def test_an_attempt_is_its_try_s_verdict_and_the_tail_of_its_message():
    failed = report.fail(dict(report.new_report("llm-infer", {}), seconds=3.0), "oom",
                         "x" * 600 + "CUDA out of memory", "run")
    entry = report.attempt(2, failed, {"batch": 4})
    assert entry == {"attempt": 2, "status": "failed", "error_class": "oom",
                     "message": ("x" * 600 + "CUDA out of memory")[-500:], "seconds": 3.0,
                     "changed": {"batch": 4}, "next": None}
    assert report.attempt(1, ok(), {})["error_class"] is None
    assert report.validate(dict(ok(), attempts=[entry])) == []


def test_fields_with_their_own_checks_are_named_once():
    problems = report.validate(dict(ok(), phases={}, memory=[]))
    assert problems == ["`report.phases` must be a list", "`report.memory` must be an object"]


# --- stability: a fixed count is still judged --------------------------------

def test_the_fixed_count_bound_is_llm_infers_default_stop_rule():
    default = next(p.default for p in spec.LLM_INFER.params if p.name == "stability")
    assert stats.FIXED_BOUND == default / 100


def test_a_fixed_count_with_a_wide_spread_is_labelled_unstable():
    # stability=0 used to leave `stable` None: 1460.8% went out with no label.
    fixed = {"count": 5, "iqr_over_median": 14.608, "threshold": None, "stopped_by": "count",
             "seconds": 1.0, "stable": None}
    st = stats.judged(fixed)
    assert st["stable"] is False and st["bound"] == 0.05
    line = summary.stability(st)
    assert line.startswith("UNSTABLE: IQR/median 1460.8% ≥ the 5% bound over a fixed 5 requests")
    quiet = stats.judged({**fixed, "iqr_over_median": 0.01})
    assert quiet["stable"] is True and "under the 5% bound" in summary.stability(quiet)
    one = stats.judged({**fixed, "count": 1, "iqr_over_median": None})
    assert one["stable"] is None and "too few to judge" in summary.stability(one)
    # an adaptive run keeps its own verdict
    adaptive = {**fixed, "threshold": 0.05, "stable": True, "stopped_by": "stable",
                "iqr_over_median": 0.02}
    assert stats.judged(adaptive) is adaptive
    # a report from before the bound keeps its old line
    assert summary.stability(fixed) == "IQR/median 1460.8% over a fixed 5 requests"


def test_fixed_stability_counts_the_steps_it_was_given():
    st = stats.fixed_stability([1.0, 1.0, 1.0, 5.0], 8.0)
    assert st["count"] == 4 and st["seconds"] == 8.0 and st["stopped_by"] == "count"
    assert st["iqr_over_median"] == pytest.approx(stats.iqr_ratio([1.0, 1.0, 1.0, 5.0]))
    assert "4 steps" in summary.stability(st, "step")


def test_a_model_output_that_is_not_finite_is_reported_as_null():
    # an fp16 overflow or a diverged loss: JSON has no NaN, and the bot refuses one
    assert [stats.finite(x) for x in (1.5, float("nan"), float("inf"), -float("inf"))] == [
        1.5, None, None, None]
    r = ok()
    r["quality_probe"] = {"first_tokens": [3], "logits_head": [0.5, None], "logits_sd": None,
                          "what": "x"}
    assert report.validate(r) == []
    r["quality_probe"]["logits_head"][1] = float("nan")
    assert report.validate(r) == ["`report.quality_probe.logits_head[1]` is nan: JSON has no "
                                  "NaN or Infinity; send a finite number, or null where nothing "
                                  "was measured"]
