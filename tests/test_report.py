"""The trial report's one definition (worker/report.py): the types, and the
validator that checks a posted report against them before the bot stores it."""
import typing

import pytest

from worker import report


def ok():
    return dict(report.new_report("llm-infer", {"batch": 1}), status="ok")


def test_a_new_report_is_valid_once_it_has_a_verdict():
    assert report.validate(ok()) == []
    assert report.validate(report.fail(report.new_report("recipe", {}), "oom", "x")) == []
    assert "status must be 'ok' or 'failed'" in report.validate(report.new_report("x", {}))


def test_memory_fields_are_the_types_memory_fields():
    declared = set(typing.get_type_hints(report.Memory)) - {"method", "devices"}
    assert declared == set(report.MEMORY_FIELDS)


@pytest.mark.parametrize("key, value, says", [
    ("latency", [1, 2], "latency must be an object or null"),
    ("seconds", "12", "seconds must be a number or null"),
    ("seconds_lost", None, "seconds_lost must be a number"),
    ("attempts", {"a": 1}, "attempts must be a list"),
    ("recipe", 7, "recipe must be a string or null"),
    ("headline", True, "headline must be an object or null"),
])
def test_a_field_of_the_wrong_type_is_named(key, value, says):
    assert says in report.validate(dict(ok(), **{key: value}))


def test_fields_with_their_own_checks_are_named_once():
    problems = report.validate(dict(ok(), phases={}, memory=[]))
    assert problems == ["phases must be a list of {name, start, end, seconds}",
                        "memory must be an object with a method object"]
