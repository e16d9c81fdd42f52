"""A parsed JSON document checked against TypedDict annotations: JSON types,
required keys, list sizes and number ranges, each problem named by its JSON
path (`report.attempts[2].seconds`). The trial report (worker/report.py)
declares what it needs with `Annotated[...]` marks:

    seconds: Annotated[float | None, SECONDS]    # SECONDS a Range
    attempts: Annotated[list[Attempt], Most(100)]
    name: Annotated[str, REQUIRED]

Numbers are int or float alike (never bool); every number anywhere in the
document, annotated or not, must be finite. Pure: no I/O.
"""
from __future__ import annotations

import functools
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Literal, TypeGuard, Union

MAX_PROBLEMS = 10  # a report wrong in 3000 places is named by its first few
MAX_DEPTH = 32  # objects in objects: the report's own go 5 deep
# Any number anywhere, bounded or not: a year of 10^9 per second is 3·10^16, a
# 10^13-parameter model's bytes 10^14; past this nothing is physical.
MAX_MAGNITUDE = 10**18


@dataclass(frozen=True)
class Range:
    """The numbers a field may hold; `what` says them to a person."""
    low: float
    high: float
    what: str


@dataclass(frozen=True)
class Most:
    """At most this many items in a list or keys in an object."""
    items: int


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()  # a TypedDict key that must be present (Python 3.10 has no Required[])


def loads(raw: bytes | str) -> object:
    """JSON as the standard has it: NaN, Infinity and numbers past a float's
    range (1e999) are refused with a ValueError naming where they are (Python's
    json takes them, SQLite's json_extract does not); any number over
    MAX_MAGNITUDE, wherever it is, raises Absurd (a ValueError) naming it."""
    try:
        doc = json.loads(raw, parse_constant=_refuse, parse_float=_finite)
    except _NotFinite as exc:
        try:
            where = loose(json.loads(raw))
        except (ValueError, RecursionError):
            where = []
        raise ValueError(where[0] if where else f"{exc} is not a number JSON has: send a "
                         "finite number, or null where nothing was measured") from None
    huge = next((f for f in loose(doc) if "in size" in f), None)  # in any body at all
    if huge:
        raise Absurd(huge)
    return doc


class Absurd(ValueError):
    """A body that is JSON but holds a number no worker measures or derives."""


class _NotFinite(ValueError):
    pass


def _refuse(name: str):
    raise _NotFinite(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text[:40])
    return value


def problems(value: object, hint: object, path: str) -> list[str]:
    """What is wrong with `value` as `hint` (a TypedDict, list[...], a union...)."""
    out: list[str] = []
    _check(value, hint, path, out)
    out += loose(value, path)
    return list(dict.fromkeys(out))[:MAX_PROBLEMS]


def loose(value: object, path: str = "") -> list[str]:
    """Problems anywhere, annotated or not: a NaN or infinite number, one over
    MAX_MAGNITUDE in size, nesting deeper than MAX_DEPTH. A stack, not
    recursion: a body nested hundreds deep must not exhaust Python's."""
    found: list[str] = []
    stack = [(path, value, 0)]
    while stack and len(found) < MAX_PROBLEMS:
        where, v, depth = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            found.append(f"`{where}` is {v!r}: JSON has no NaN or Infinity; send a finite "
                         "number, or null where nothing was measured")
        elif number(v) and abs(v) > MAX_MAGNITUDE:  # a field no bound names prints it whole
            found.append(f"`{where}` is {_short(v)}: no figure a worker measures or derives "
                         f"is over {MAX_MAGNITUDE:.0e} in size")
        elif isinstance(v, (dict, list)) and depth >= MAX_DEPTH:
            found.append(f"`{where}` is nested more than {MAX_DEPTH} deep")
        elif isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x, depth + 1)
                      for k, x in reversed(v.items())]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x, depth + 1) for i, x in reversed(list(enumerate(v)))]
    return found


def _short(v) -> str:
    """A huge number as a few characters, not its hundreds of digits."""
    return f"{float(v):.3g}" if abs(v) < 1e308 else f"a {len(str(abs(int(v))))}-digit number"


def outside(value, bound: Range) -> bool:
    """A finite number outside `bound` (a NaN or infinity is named by `loose`)."""
    return (number(value) and (isinstance(value, int) or math.isfinite(value))
            and not bound.low <= value <= bound.high)


def _unwrap(hint) -> tuple[object, tuple]:
    if typing.get_origin(hint) is Annotated:
        return hint.__origin__, hint.__metadata__
    return hint, ()


def number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class _Option:
    """One type a union allows, worked out once: a report has thousands of values."""
    hint: object
    marks: tuple
    # the Python type a value must be, "number", "null", or Literal's choices
    json: type | str | tuple[object, ...]
    origin: object
    args: tuple
    name: str


@functools.cache
def _plan(hint) -> tuple[tuple[_Option, ...], tuple]:
    """The options of `hint` (each of a union's) and the marks on the whole."""
    base, marks = _unwrap(hint)
    union = typing.get_origin(base) in (Union, types.UnionType)
    return tuple(_option(o) for o in (typing.get_args(base) if union else (base,))), marks


def _option(hint) -> _Option:
    base, marks = _unwrap(hint)
    origin, args = typing.get_origin(base), typing.get_args(base)
    kind = origin or base
    json_type: type | str | tuple[object, ...]
    if base is type(None):
        json_type, name = "null", "null"
    elif kind is Literal:
        json_type, name = args, "one of " + ", ".join(repr(a) for a in args)
    elif base in (int, float):
        json_type, name = "number", "a number"
    elif kind in (list, dict, str, bool):
        json_type = kind
        name = {list: "a list", dict: "an object", str: "a string", bool: "true or false"}[kind]
    elif typing.is_typeddict(base):
        json_type, name = dict, "an object"
    else:
        json_type, name = object, "anything"
    return _Option(base, marks, json_type, origin, args, name)


def _fits(value, option: _Option) -> bool:
    kind = option.json
    if kind == "number":
        return number(value)
    if kind == "null":
        return value is None
    if isinstance(kind, tuple):
        return value in kind
    assert isinstance(kind, type)  # "number" and "null" are answered above
    return isinstance(value, kind)


def _check(value, hint, path: str, out: list[str]) -> None:
    options, marks = _plan(hint)
    match = next((o for o in options if _fits(value, o)), None)
    if match is None:
        names = list(dict.fromkeys(o.name for o in options))
        said = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        shown = "" if isinstance(value, (dict, list)) else f" (got {_shown(value)})"
        out.append(f"`{path}` must be {said}{shown}")
        return
    if value is None:
        return
    for mark in marks + match.marks:
        if isinstance(mark, Range) and outside(value, mark):
            out.append(f"`{path}` is {_shown(value)}: must be {mark.what}")
        if isinstance(mark, Most) and isinstance(value, (list, dict)) and len(value) > mark.items:
            out.append(f"`{path}` has {len(value)} items: at most {mark.items} are allowed")
            return
    if typing.is_typeddict(match.hint):
        _object(value, match.hint, path, out)
    elif match.origin is list and match.args:
        for i, item in enumerate(value):
            _check(item, match.args[0], f"{path}[{i}]", out)
            if len(out) >= MAX_PROBLEMS:
                return
    elif match.origin is dict and match.args:
        for key, item in value.items():
            _check(item, match.args[1], f"{path}.{key}", out)


def _object(value: dict, cls, path: str, out: list[str]) -> None:
    for key, hint in _hints(cls).items():
        if key in value:
            _check(value[key], hint, f"{path}.{key}", out)
        elif REQUIRED in _unwrap(hint)[1]:
            out.append(f"`{path}.{key}` is missing")


_HINTS: dict = {}


def _hints(cls) -> dict:
    """A TypedDict's annotations, marks kept, worked out once per class."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
