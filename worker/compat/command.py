"""`trialbot-worker check PATH [--json] [--python 3.12] [--platform linux] [--offline]`:
the reader's report (worker/compat/), its pins resolved for a target when asked
(worker/compat/resolve.py), as text or JSON (docs/compat.md)."""
from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable

from worker import compat
from worker.compat import resolve, show
from worker.compat.resolve import Target
from worker.i18n import N_, _

CHECK_USAGE = N_("usage: `trialbot-worker check PATH [--json] [--python 3.12] [--platform linux] "
                 "[--offline] [--resolve]`, PATH a repository's checkout, e.g. "
                 "`trialbot-worker check ./Medusa --python 3.12`")


def main(words: list[str], uv: Callable[[], str | None]) -> int:
    """`check PATH [--json] [--python V] [--platform P] [--offline] [--resolve]`: the
    static reader's report, its pins resolved for a target when one of the last four is
    given; 2 for a path or target it cannot use, 1 for a directory with no Python code, a
    file it could not read, or pins that did not resolve (or could not be resolved)."""
    options = _check_options(words)
    if options is None:
        print(_(CHECK_USAGE), file=sys.stderr)
        return 2
    path, as_json, target, uv_options = options
    try:
        report = compat.read(path)
        if target:
            report = dataclasses.replace(report, resolution=resolve.check(report, target, uv(),
                                                                          uv_options))
    except compat.CheckError as exc:
        print(_("`{path}` does not exist: give the folder of a repository's checkout, e.g. "
                "`trialbot-worker check ./Medusa`", path=exc.path) if exc.why == "missing" else
              _("`{path}` is a file, not a folder: give the repository's top folder, e.g. "
                "`trialbot-worker check ./Medusa`", path=exc.path), file=sys.stderr)
        return 2
    except resolve.TargetError as exc:
        print(_("`--python {value}` is not a version like `3.12`: give one, e.g. "
                "`--python 3.12`", value=exc.value) if exc.what == "python" else
              _("`--platform {value}` is not a platform uv knows: give one of `linux`, "
                "`macos`, `windows`, `x86_64-manylinux_2_28`, `aarch64-apple-darwin` "
                "(`uv pip compile --help` lists them all)", value=exc.value), file=sys.stderr)
        return 2
    print(json.dumps(report.as_json(), indent=2) if as_json else show.text(report))
    resolved = report.resolution is None or report.resolution.status == "resolved"
    return 0 if report.python_files and not report.unread and resolved else 1


def _check_options(words: list[str]) \
        -> tuple[str, bool, Target | None, tuple[str, ...]] | None:
    """PATH, --json, the target to resolve for (None: not asked) and uv's options;
    None for words it does not know."""
    values = {"--python": "", "--platform": ""}
    flags: set[str] = set()
    paths: list[str] = []
    rest = iter(words)
    for word in rest:
        if word in values:
            values[word] = next(rest, "")
            if not values[word]:
                return None
        elif word in ("--json", "--offline", "--resolve"):
            flags.add(word)
        elif word.startswith("--") or paths:
            return None
        else:
            paths.append(word)
    if len(paths) != 1:
        return None
    asked = values["--python"] or values["--platform"] or flags & {"--offline", "--resolve"}
    own = resolve.default_target()
    target = resolve.Target(values["--python"] or own.python,
                            values["--platform"] or own.platform) if asked else None
    return paths[0], "--json" in flags, target, ("--offline",) if "--offline" in flags else ()
