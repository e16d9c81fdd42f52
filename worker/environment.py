"""A recipe's own environment: what defines it (the repository, its commit,
its requirement files, extra pins, the Python) and the checks that can be made
when the worker starts. Building it is worker/launcher/envbuild.py's.

    [recipes.specdec]
    repo = "https://github.com/feifeibear/LLMSpeculativeSampling"   # or a local path
    commit = "7f1e0c2"
    requirements = ["requirements.txt"]     # files of the repository; "." installs it
    packages = ["accelerate==0.21.0"]       # extra pins
    python = "3.11"                         # optional: an interpreter on this worker
    torch = "worker"                        # the box's torch (default), or "recipe"

The box's torch is never replaced: with torch = "worker" the environment sees
the worker's own torch (a GPU box's CUDA build), and a repository's torch pin
is shown, not installed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from worker.codeversion import git
from worker.i18n import _

TORCH_MODES = ("worker", "recipe")
# A requirement's name, as pip reads it (PEP 508), and what may follow it.
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)")
PROJECT = re.compile(r"\.(\[[A-Za-z0-9_,.\- ]+\])?")  # "." or ".[extra,...]": the repository
PYTHON = re.compile(r"3\.\d{1,2}(\.\d{1,3})?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class EnvironmentProblem(ValueError):
    """Something about a recipe's environment that is wrong; the message says
    what and how to change it."""


@dataclass(frozen=True)
class EnvSpec:
    """What defines a recipe's environment (all from the recipe file)."""
    repo: str | None = None          # a git URL, or an absolute local path
    commit: str | None = None
    requirements: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    python: str | None = None        # "3.11": found on this worker, never downloaded
    torch: str = "worker"
    cache: str = ""                  # where environments and checkouts are kept

    @property
    def declared(self) -> bool:
        """Whether the recipe asks for its own environment at all."""
        return bool(self.repo or self.requirements or self.packages or self.python)

    @property
    def local(self) -> bool:
        return bool(self.repo and is_local(self.repo))


def is_local(repo: str) -> bool:
    return "://" not in repo and not re.match(r"[\w.-]+@[\w.-]+:", repo)


def default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("TRIALBOT_ENV_CACHE") or os.path.join(base, "trialbot")


def declared(spec: EnvSpec, base: str) -> dict[str, list[str]]:
    """The requirement lines of the recipe's files (under `base`) and its
    `packages`, by package name, as written."""
    lines = list(spec.packages)
    for entry in spec.requirements:
        if not PROJECT.fullmatch(entry):
            try:
                with open(os.path.join(base, entry), errors="replace") as f:
                    lines += f.read().splitlines()
            except OSError:
                pass
    out: dict[str, list[str]] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        m = REQUIREMENT.fullmatch(line) if line and not line.startswith("-") else None
        if m:
            out.setdefault(re.sub(r"[-_.]+", "-", m.group(1)).lower(), []).append(line)
    return out


def meets(version: str, pin: str) -> bool | None:
    """Whether `version` satisfies the requirement line `pin`, as pip reads it
    (a local label like +cu126 is ignored); None for a line it cannot read."""
    try:
        req = Requirement(pin)
        return req.specifier.contains(Version(version).public, prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return None


def other_torch(pins: list[str], version: str) -> list[str]:
    """The pins the worker's torch `version` does not satisfy."""
    return [p for p in pins if meets(version, p) is False]


def key(parts: dict) -> str:
    """The environment's cache key: a hash of everything that defines it."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def resolver_lines(output: str, limit: int = 20) -> str:
    """The lines of uv's or pip's output that say why a build failed: from the
    first error on, without colour; else the last lines."""
    lines = [ANSI.sub("", x).rstrip() for x in output.splitlines() if x.strip()]
    start = next((i for i, x in enumerate(lines)
                  if re.match(r"\s*(×|error:|ERROR:|Because|fatal:)", x)), None)
    picked = lines[start:start + limit] if start is not None else lines[-limit:]
    return "\n".join(picked)


def check_spec(spec: EnvSpec, cwd_base: str) -> None:
    """What can be known when the worker starts: a local repository, its
    commit and files; the interpreter asked for. Raises EnvironmentProblem."""
    if spec.repo and not spec.commit:
        raise EnvironmentProblem(_("`repo` needs `commit` (a commit hash or tag: a branch "
                                   "moves, and a plan must know what it measured)"))
    if spec.commit and not spec.repo:
        raise EnvironmentProblem(_("`commit` needs `repo` (the repository it is a commit of)"))
    if spec.local:
        assert spec.repo and spec.commit  # local: a repo, whose commit is checked above
        if not os.path.isdir(spec.repo):
            raise EnvironmentProblem(_("repo `{repo}` is not a directory on this worker; "
                                       "give a git URL or the path of a checkout",
                                       repo=spec.repo))
        if git(spec.repo, "rev-parse", "--git-dir").returncode != 0:
            raise EnvironmentProblem(_("repo `{repo}` is not a git repository; "
                                       "`git init` it and commit, or give its URL",
                                       repo=spec.repo))
        resolved = resolve_commit(spec.repo, spec.commit)
        for entry in spec.requirements:
            if not _in_commit(spec.repo, resolved, entry):
                raise EnvironmentProblem(missing_requirement(entry, spec.commit))
    elif not spec.repo:
        for entry in spec.requirements:
            if not on_disk(cwd_base, entry):
                raise EnvironmentProblem(missing_requirement(entry, None, cwd_base))
    if spec.python:
        interpreter(spec.python)
        if spec.torch == "worker" and not same_minor(spec.python):
            here = "{}.{}".format(*sys.version_info[:2])
            raise EnvironmentProblem(_(
                "python {version} cannot load this worker's torch (built for Python "
                "{here}); remove `python`, or set torch = \"recipe\" to install the "
                "repository's own torch", version=spec.python, here=here))


def same_minor(version: str) -> bool:
    return version.split(".")[:2] == [str(x) for x in sys.version_info[:2]]


def missing_requirement(entry: str, commit: str | None, base: str | None = None) -> str:
    where = (_("at commit {commit}", commit=commit) if commit
             else _("in {directory}", directory=base))
    if PROJECT.fullmatch(entry):
        return _("requirements entry `{entry}` installs the repository itself, but there is no "
                 "setup.py or pyproject.toml {where}; remove it or list the repository's "
                 "requirements file", entry=entry, where=where)
    return _("requirements file `{entry}` does not exist {where}; list the repository's own "
             "files (e.g. requirements.txt), or put pins in `packages`", entry=entry, where=where)


def resolve_commit(repo: str, commit: str) -> str:
    found = commit_of(repo, commit)
    if found is None:
        raise EnvironmentProblem(_("commit `{commit}` is not in repo `{repo}`; give a commit "
                                   "hash or tag that `git log` shows there", commit=commit,
                                   repo=repo))
    return found


def commit_of(repo: str, rev: str) -> str | None:
    """The full hash `rev` names in `repo`, or None."""
    out = git(repo, "rev-parse", "--verify", "--quiet", rev + "^{commit}")
    return out.stdout.strip() if out.returncode == 0 else None


def entry_files(entry: str) -> tuple[str, ...]:
    """The files a requirements entry stands for: "." is the repository's
    setup.py or pyproject.toml, anything else a requirements file."""
    return ("setup.py", "pyproject.toml") if PROJECT.fullmatch(entry) else (entry,)


def _in_commit(repo: str, commit: str, entry: str) -> bool:
    return any(git(repo, "cat-file", "-e", f"{commit}:{n}").returncode == 0
               for n in entry_files(entry))


def on_disk(base: str, entry: str) -> bool:
    return any(os.path.isfile(os.path.join(base, n)) for n in entry_files(entry))


def uv_binary() -> str | None:
    """uv from its PyPI package (a worker dependency), else one on PATH."""
    try:
        import uv  # the package ships the binary
        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def interpreter(version: str) -> str:
    """The path of an installed Python `version`; never downloads one."""
    if not PYTHON.fullmatch(version):
        raise EnvironmentProblem(_("python `{version}` is not a version like \"3.11\"",
                                   version=version))
    if same_minor(version) and sys.version.startswith(version):
        return sys.executable
    uv = uv_binary()
    if uv:
        found = subprocess.run([uv, "python", "find", "--no-project", version],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    path = shutil.which("python" + ".".join(version.split(".")[:2]))
    if path:
        return path
    raise EnvironmentProblem(_("python {version} is not installed on this worker (the worker "
                               "never downloads one); install it (e.g. `uv python install "
                               "{version}`) or remove `python` to use this worker's {mine}",
                               version=version, mine=sys.version.split()[0]))
