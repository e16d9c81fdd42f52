"""Modules and functions that fit in a head (#32): no module in bot/, worker/
or scripts/ over 500 lines, no function or method over 60, except those in
EXCEPTIONS, each with its reason. An exception that no longer exists or now
fits fails too, so the list cannot go stale. Pure `ast`: well under a second."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
PACKAGES = ("bot", "worker", "scripts")
MAX_MODULE = 500  # lines
MAX_FUNCTION = 60  # lines, from `def` to its last line (decorators not counted)

# "path::name" (a method as Class.method, a nested function as outer.inner): why it is longer.
EXCEPTIONS: dict[str, str] = {}  # "path::function": why it may stay longer


def modules() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (ROOT / d).rglob("*.py")
                  if "__pycache__" not in p.parts)


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, node.end_lineno - node.lineno + 1
            yield from functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, prefix + node.name + ".")
        else:
            yield from functions(node, prefix)


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of every module, and of every function as "path::name"."""
    mods, funcs = {}, {}
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        mods[rel] = len(text.splitlines())
        for name, lines in functions(ast.parse(text, rel)):
            funcs[f"{rel}::{name}"] = max(lines, funcs.get(f"{rel}::{name}", 0))
    return mods, funcs


def test_modules_fit():
    mods, _funcs = sizes()
    over = [f"{path}: {n} lines" for path, n in mods.items()
            if n > MAX_MODULE and path not in EXCEPTIONS]
    assert not over, (f"modules over {MAX_MODULE} lines (split one along its seams, or list "
                      "it in EXCEPTIONS with the reason):\n" + "\n".join(over))


def test_functions_fit():
    _mods, funcs = sizes()
    over = [f"{key}: {n} lines" for key, n in sorted(funcs.items())
            if n > MAX_FUNCTION and key not in EXCEPTIONS]
    assert not over, (f"functions over {MAX_FUNCTION} lines (split one along its seams, or "
                      "list it in EXCEPTIONS with the reason):\n" + "\n".join(over))


def test_exceptions_are_needed():
    mods, funcs = sizes()
    stale = []
    for key, reason in EXCEPTIONS.items():
        assert reason.strip(), f"{key}: an exception needs its reason"
        if "::" not in key:
            n = mods.get(key)
            if n is None or n <= MAX_MODULE:
                stale.append(f"{key}: " + ("no such module" if n is None
                                           else f"{n} lines, within {MAX_MODULE}"))
            continue
        n = funcs.get(key)
        if n is None or n <= MAX_FUNCTION:
            stale.append(f"{key}: " + ("no such function" if n is None
                                       else f"{n} lines, within {MAX_FUNCTION}"))
    assert not stale, "EXCEPTIONS lists what no longer needs it; remove:\n" + "\n".join(stale)


def test_the_walk_finds_functions_methods_and_nested_ones():
    tree = ast.parse("class A:\n    def m(self):\n        def inner():\n            pass\n"
                     "def f():\n    pass\nif True:\n    def g():\n        pass\n")
    assert dict(functions(tree)) == {"A.m": 3, "A.m.inner": 2, "f": 2, "g": 2}
