"""The checks of a report that its annotations cannot say (worker/report.validate):
the timeline's rows, thousands of them, and `params` against the job's
stored spec."""
from __future__ import annotations

from typing import Any

from worker import shape
from worker import spec as specs
from worker.limits import BYTES, TIME


def timeline(timeline: object) -> list[str]:
    """Each row as wide as its columns: a Unix time, then bytes or null. Checked
    here rather than by annotation: thousands of rows, the first bad one named."""
    out: list[str] = []
    for name, part in (timeline or {}).items() if isinstance(timeline, dict) else ():
        if not (isinstance(part, dict) and isinstance(part.get("columns"), list)
                and isinstance(part.get("rows"), list)):
            continue  # its shape is named already
        width = len(part["columns"])
        bounds = (TIME, *[BYTES] * (width - 1))
        for i, row in enumerate(part["rows"]):
            where = f"report.timeline.{name}.rows[{i}]"
            if not isinstance(row, list) or len(row) != width or not all(
                    v is None or shape.number(v) for v in row):
                return out + [f"`{where}` must be a list of {width} numbers or nulls, one per "
                              "column"]
            for value, bound in zip(row, bounds):
                if value is not None and shape.outside(value, bound):
                    return out + [f"`{where}` holds {value!r}: must be {bound.what}"]
    return out


def params(values: dict[str, Any], spec: object) -> list[str]:
    """Each parameter of the kind the job's spec has for it: a built-in
    workload's parameter in its range or choices, a recipe's as queued."""
    if not isinstance(spec, dict) or not isinstance(spec.get("params"), dict):
        return []
    workload = None if spec.get("recipe") else specs.WORKLOADS.get(str(spec.get("workload")))
    out: list[str] = []
    for key, value in values.items():
        if isinstance(value, (dict, list)):
            continue  # not a scalar: named already
        param = workload.param(key) if workload else None
        queued = spec["params"].get(key)
        if param is not None:
            wrong, what = not _allowed(param, value), _allowed_text(param)
        elif key in spec["params"]:
            wrong = _kind(value) != _kind(queued)
            what = f"{_kind(queued)}, as the job was queued with `{key}={queued}`"
        else:
            continue
        if wrong:
            out.append(f"`report.params.{key}` is {value!r}: must be {what}")
    return out


def _allowed(param: specs.Param, value: object) -> bool:
    if param.kind in ("choice", "string"):
        return isinstance(value, str) and (param.kind == "string" or value in param.choices)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False  # a whole number for any numeric parameter, a float for a float's
    assert param.low is not None and param.high is not None  # a numeric parameter's range
    return (isinstance(value, int) or param.kind == "float") and param.low <= value <= param.high


def _allowed_text(param: specs.Param) -> str:
    if param.kind == "choice":
        return "one of " + ", ".join(param.choices)
    if param.kind == "string":
        return "a string"
    kind = "a whole number" if param.kind == "int" else "a number"
    return f"{kind} from {param.low} to {param.high}"


def _kind(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return "a whole number"
    return "a number" if isinstance(value, float) else "a string"
