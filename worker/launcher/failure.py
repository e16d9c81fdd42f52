"""A recipe's failure named for what it is, from what the probe saw reach the
top of the program (worker/probe/trialbot_failure.py): a module it cannot
import before its first unit is the environment's fault, and so is a
TypeError or AttributeError out of a library the repository pins to another
version. Anything else stays the judge's (crash, oom, killed...)."""
from __future__ import annotations

import os
import re

from worker import environment

LIBRARY_ERRORS = ("TypeError", "AttributeError", "ImportError", "NameError")


def environment_error(probe: dict, cwd: str, declared: dict[str, list[str]],
                      own_env: bool, worker_torch: bool = False) -> tuple[str, str] | None:
    """(message, phase) for an environment failure, or None. `declared`: the
    repository's pins by package name; `own_env`: the recipe has its own
    environment (else it runs in the worker's); `worker_torch`: that
    environment runs the worker's torch in place of the repository's pin."""
    exc = probe.get("exception")
    if not exc:
        return None
    phase = probe.get("phase_at_exit") or "launch"
    if exc["type"] == "ModuleNotFoundError" and exc.get("module") and \
            not probe.get("units_seen"):
        return _missing(exc["module"], cwd, declared, own_env), phase
    library = exc.get("in_library")
    if exc["type"] in LIBRARY_ERRORS and library:
        versions = exc.get("versions") or {}
        installed, pins = versions.get(library), declared.get(library) or []
        torch_pins, torch = declared.get("torch") or [], versions.get("torch")
        if worker_torch and torch and torch_pins and not _meets(torch, torch_pins) \
                and _meets(installed or "", pins):
            # The one version the worker chose for it: its own torch, not the pin.
            return (f"likely the worker's torch: {exc['type']} raised in {library}'s own code: "
                    f"{exc['message'][:300]}\nthe repository pins {', '.join(torch_pins)}; this "
                    f"worker's torch {torch} ran it. Set torch = \"recipe\" to install the "
                    "pinned torch, or run it on a worker with that torch"), phase
        if installed is None or _meets(installed, pins):
            return None  # the version it asks for: the program's own bug
        wanted = (f"the repository declares {', '.join(pins)}" if pins
                  else "the repository declares no version of it")
        return (f"likely a version mismatch: {exc['type']} raised in {library}'s own code: "
                f"{exc['message'][:300]}\n{library} {installed} is installed; {wanted}. Pin "
                "the version the code was written for in `packages` or `requirements`"), phase
    return None


def _meets(version: str, pins: list[str]) -> bool:
    """Whether `version` satisfies every pin (no pin: nothing asked)."""
    return bool(version) and all(environment.meets(version, p) is not False for p in pins)


def _missing(module: str, cwd: str, declared: dict[str, list[str]], own_env: bool) -> str:
    top = module.split(".")[0]
    if os.path.isdir(os.path.join(cwd, top)) or os.path.isfile(os.path.join(cwd, top + ".py")) \
            or _in_repo(cwd, top):
        return (f"`import {module}` failed: no module named `{top}`, and `{top}` is this "
                "repository's own package. Add \".\" to `requirements` (installs the "
                "repository) or set `cwd` to the directory that holds it")
    name = _norm(top)
    declared_here = [p for n, ps in declared.items() if _norm(n) == name for p in ps]
    if declared_here:
        return (f"`import {module}` failed: no module named `{top}`, though the repository "
                f"declares {', '.join(declared_here)}; the environment's build did not "
                "install it: look at the build's output and the pin")
    if own_env:
        return (f"`import {module}` failed: no module named `{top}`; no requirement of this "
                f"recipe brings it. Add the package that provides `{top}` to `packages`")
    return (f"`import {module}` failed: no module named `{top}`; this recipe runs in the "
            "worker's own environment. Declare the repository's `requirements` (or "
            "`packages`) and the worker builds an environment with them")


def _in_repo(cwd: str, top: str) -> bool:
    """A package of the repository one or two levels down (src/NAME, repo/NAME)."""
    for entry in ("src", *(_dirs(cwd))):
        if os.path.isdir(os.path.join(cwd, entry, top)):
            return True
    return False


def _dirs(path: str) -> list[str]:
    try:
        return [e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e))][:50]
    except OSError:
        return []


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

