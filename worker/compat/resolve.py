"""Whether the pins the reader found resolve for a target Python and platform.

uv's resolver (`uv pip compile`) in its compile mode: nothing is installed, and
`--no-build` keeps it from building (running) any source distribution, so a pin
with only an sdist is named as such. Each dependency file is resolved on its own
(a requirements-rocm.txt is another environment than requirements.txt). uv
names one unsatisfiable pin at a time: that pin is named with its file:line,
left out, and the rest resolved again, a few rounds at most. A worker that
cannot reach a package index says so (from uv's own error) and skips this part.
"""
from __future__ import annotations

import os
import platform as host
import re
import subprocess
import sys
import time
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from worker import redact
from worker.compat.report import Pin, Report, Resolution, Unresolved

TIMEOUT = 120.0   # seconds for all of one check's resolutions
TIMED_OUT = "timeout"  # Resolution.detail when TIMEOUT ran out (else uv's own words)
ROUNDS = 4        # unsatisfiable pins named per dependency file, at most
PYTHON = re.compile(r"3\.\d{1,2}")
# uv's sentence -> why (Unresolved.why), the first that matches.
WHY = (("matching Python ABI tag", "python"), ("matching Python implementation tag", "python"),
       ("Python version", "python"), ("depends on Python", "python"),
       ("matching platform tag", "platform"), ("no usable wheels", "source_only"),
       ("there is no version of", "no_version"), ("was not found in the package", "not_found"),
       ("was not found in the provided", "not_found"))
# uv's words for an index it could not reach (or may not reach: --offline).
UNREACHABLE = ("Failed to fetch", "error sending request", "dns error", "tcp connect error",
               "network was disabled", "Could not connect", "timed out")


class TargetError(ValueError):
    """A target uv does not know: `what` is python or platform, `value` as given."""

    def __init__(self, what: str, value: str) -> None:
        super().__init__(f"{what}: {value}")
        self.what = what
        self.value = value


@dataclass(frozen=True)
class Target:
    python: str     # "3.12"
    platform: str   # one of uv's --python-platform values


def default_target() -> Target:
    """This worker's own Python and platform, in uv's names."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(host.machine().lower(),
                                                           host.machine().lower())
    system = {"Linux": f"{machine}-unknown-linux-gnu", "Darwin": f"{machine}-apple-darwin",
              "Windows": f"{machine}-pc-windows-msvc"}.get(host.system(), "linux")
    return Target(f"{sys.version_info.major}.{sys.version_info.minor}", system)


def check(report: Report, target: Target, uv: str | None, options: tuple[str, ...] = (),
          timeout: float = TIMEOUT) -> Resolution:
    """The report's pins resolved for `target` by the uv binary `uv` (the worker's:
    worker/environment.py uv_binary(); None: not installed). `options` go to uv as they
    are (`--offline`, `--no-index --find-links DIR`)."""
    if not PYTHON.fullmatch(target.python):
        raise TargetError("python", target.python)
    if not uv:
        return Resolution(target.python, target.platform, "no_resolver")
    groups, left_out = _groups(report.pins)
    extra = [a for url in report.indexes if url.startswith(("https://", "http://"))
             for a in ("--extra-index-url", url)]
    if extra:  # pip looks at every index for the best version; uv's default stops at one
        extra += ["--index-strategy", "unsafe-best-match"]
    extra += [a for url in report.find_links if url.startswith(("https://", "http://"))
              for a in ("--find-links", url)]
    deadline = time.monotonic() + timeout
    problems = _requires_python(report.requires_python, target.python)
    count = 0
    for pins in groups.values():
        run = _Run(uv, target, (*options, *extra), deadline)
        outcome = run.resolve(pins)
        if outcome.skipped:  # what was found without the index stays said
            return Resolution(target.python, target.platform, "skipped", tuple(groups),
                              problems=tuple(problems), detail=outcome.skipped,
                              left_out=tuple(left_out))
        problems += outcome.problems
        count += outcome.resolved
    return Resolution(target.python, target.platform, "unresolved" if problems else "resolved",
                      tuple(groups), count, tuple(problems), tuple(left_out))


def _requires_python(declared: tuple[str, ...], python: str) -> list[Unresolved]:
    """The repository's own `requires-python` ("file: >=3.8,<3.11") that excludes the
    target; conda's and Poetry's forms (`=3.10`, `^3.8`) are not PEP 440 and are passed."""
    out = []
    for entry in declared:
        file, _, spec = entry.partition(": ")
        try:
            allowed = SpecifierSet(spec)
        except InvalidSpecifier:
            continue
        if not allowed.contains(python, prereleases=True):
            out.append(Unresolved("python", spec, file, 0, "requires_python"))
    return out


def _groups(pins: tuple[Pin, ...]) -> tuple[dict[str, list[Pin]], list[Unresolved]]:
    """The pins uv can be given, per dependency file; and the rest, each with why
    (direct_reference: fetched and built; conda, poetry: not pip's syntax; extra)."""
    groups: dict[str, list[Pin]] = {}
    left: list[Unresolved] = []
    for pin in pins:
        why = ("direct_reference" if pin.url else
               pin.group if pin.group in ("conda", "poetry") else
               "extra" if pin.group not in ("", "pip", pin.file.rsplit("/", 1)[-1]) else "")
        if why:
            left.append(Unresolved(pin.name, pin.spec, pin.file, pin.line, why))
        else:
            groups.setdefault(pin.file, []).append(pin)
    return groups, left


@dataclass
class _Outcome:
    resolved: int = 0
    problems: tuple[Unresolved, ...] = ()
    skipped: str = ""


class _Run:
    """One dependency file's resolution, a round per unsatisfiable pin."""

    def __init__(self, uv: str, target: Target, options: tuple[str, ...],
                 deadline: float) -> None:
        self.command = [uv, "pip", "compile", "-", "--no-config", "--no-header",
                        "--no-annotate", "--no-build", "--quiet", "--python", sys.executable,
                        "--python-version", target.python,
                        "--python-platform", target.platform, *options]
        self.deadline = deadline
        self.platform = target.platform

    def resolve(self, pins: list[Pin]) -> _Outcome:
        problems: list[Unresolved] = []
        left = list(pins)
        for _round in range(ROUNDS):
            code, out = self._uv(left)
            if code is None:
                return _Outcome(skipped=out)
            if code == 0:
                packages = [x for x in out.splitlines() if x and not x.startswith(("#", " "))]
                return _Outcome(len(packages), tuple(problems))
            if "invalid value" in out and "--python-platform" in out:
                raise TargetError("platform", self.platform)
            if any(words in out for words in UNREACHABLE):
                return _Outcome(skipped=_last_cause(out))
            pin, problem = _named(out, left)
            problems.append(problem)
            if pin is None:
                break  # uv named no pin of this file: its sentence says what conflicts
            left.remove(pin)
            if not left:
                break
        return _Outcome(0, tuple(problems))

    def _uv(self, pins: list[Pin]) -> tuple[int | None, str]:
        """uv's exit status and its words (stdout when it resolved); None: timed out."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None, TIMED_OUT
        lines = "".join(f"{p.name}{p.spec}{' ; ' + p.marker if p.marker else ''}\n" for p in pins)
        # COLUMNS: uv wraps its sentences at the terminal's width, and a wrapped
        # sentence loses the pin it names (pytest-xdist's workers set 80)
        env = {**redact.without_secrets(os.environ), "UV_PYTHON_DOWNLOADS": "never",
               "UV_HTTP_RETRIES": "0", "NO_COLOR": "1", "COLUMNS": "100000"}
        try:
            done = subprocess.run(self.command, input=lines, capture_output=True, text=True,
                                  timeout=left, env=env)
        except subprocess.TimeoutExpired:
            return None, TIMED_OUT
        return done.returncode, done.stdout if done.returncode == 0 else done.stderr


def _named(out: str, pins: list[Pin]) -> tuple[Pin | None, Unresolved]:
    """The first pin uv's sentence names, and why it does not resolve (a pin that
    depends on one without a wheel is named; uv's sentence says which)."""
    said = [line.strip().removeprefix("error:").removeprefix("cause:").strip()
            for line in out.splitlines() if line.strip().startswith(("error:", "cause:"))]
    sentence = next((line for line in said if "Because" in line),
                    ": ".join(said) or "no words from uv")
    hint = next((line.strip() for line in out.splitlines() if line.startswith("hint:")), "")
    why = next((why for words, why in WHY if words in sentence), "conflict") \
        if "Because" in sentence else "other"  # an error uv's resolver did not explain
    names = {p.name: p for p in pins}
    after = sentence.split("Because", 1)[-1].replace("there is no version of", "")
    for word in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", after):
        pin = names.get(canonicalize_name(word))
        if pin:
            return pin, Unresolved(pin.name, pin.spec, pin.file, pin.line, why,
                                   f"{sentence} {hint}".strip())
    return None, Unresolved("", "", pins[0].file if pins else "", 0, why,
                            f"{sentence} {hint}".strip())


def _last_cause(out: str) -> str:
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1].removeprefix("cause:").strip() if lines else "no words from uv"
