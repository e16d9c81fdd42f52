"""A recipe's environment, made before its program runs: the repository
fetched into the worker's cache and checked out at its commit, and an
isolated Python environment built from its requirements (uv; pip and venv
where uv is missing), cached under a hash of everything that defines it.

Every command runs as a trial's child does (Run: its own process group, the
worker's secrets out of its environment, the trial's user, timeout and
cancel): a package's build runs the package's own code. The time it takes is
the trial's `setup` phase, `found_by: recipe-environment`; a cached
environment says so and when it was built.

The box's torch is kept: with torch = "worker" the worker's own torch and what
it needs are linked into a folder of the environment's own, which a .pth file
puts on its path after site-packages, and every torch requirement is
overridden to the worker's version. An install that replaces one of the
linked packages lands in site-packages, ahead of the folder: nothing is ever
written through a link into the worker's files.
"""
from __future__ import annotations

import fcntl
import importlib.metadata as metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import cast

from worker import environment, i18n
from worker.codeversion import NO_COMMANDS
from worker.environment import PROJECT, EnvironmentProblem, EnvSpec
from worker.launcher.process import Run, child_env, read_json
from worker.report import Phase
from worker.reportparts import Built, Env

MARKER = "trialbot-env.json"
GIT = ("git", *NO_COMMANDS)
# The cache is the worker's, and a build runs the packages' own code: under
# another user it would need a cache that user owns end to end. Not yet.
TRIAL_USER = ("recipe environments (repo, requirements, packages, python) cannot run with "
              "--trial-user yet: start this worker without --trial-user for them, or run the "
              "recipe in the worker's own environment")
MAX_PACKAGES = 500


@dataclass(frozen=True)
class Made:
    """What the recipe runs with; `failure` (an `environment` error's message)
    or a stopped `run` (timeout, cancel) when it could not be made."""
    cwd: str
    python: str = sys.executable
    path_dirs: tuple[str, ...] = ()
    phase: Phase | None = None
    env: Env = field(default_factory=Env)
    pins: dict = field(default_factory=dict)  # the repository's requirement lines by name
    failure: str | None = None
    stopped: str | None = None  # the failure's class when a timeout or cancel ended it
    run: Run | None = None


class _Failed(Exception):
    def __init__(self, message: str, run: Run | None = None, stopped: str | None = None,
                 why: str = "fetch"):
        super().__init__(message)
        self.message, self.run, self.stopped, self.why = message, run, stopped, why


class FetchFailed(Exception):
    """The repository could not be had at the commit: `why` is fetch, commit
    or timeout; the message is git's words and what to do."""

    def __init__(self, why: str, message: str):
        super().__init__(message)
        self.why, self.message = why, message


def checkout(repo: str, commit: str, cache: str, seconds: float, refresh: bool = False
             ) -> tuple[str, str, bool]:
    """The repository at `commit` in the clone cache, as a recipe's is:
    (its directory, the full commit, whether it was there already). A tree
    is cached by commit: a second check of one commit fetches nothing.
    `refresh` fetches the mirror again first (a branch such as HEAD moves)."""
    name = environment.key({"repo": repo})[:16]
    repos, trees = _dirs(cache, "repos", "trees")
    before = set(os.listdir(trees))
    deadline, cancel = time.monotonic() + seconds, threading.Event()
    try:
        mirror = os.path.join(repos, name + ".git")
        if refresh and os.path.isdir(mirror):
            with _locked(mirror + ".lock", deadline, cancel):
                _run([*GIT, "-C", mirror, "remote", "update", "--prune"], repos, deadline,
                     cancel, None, f"repo {repo} could not be fetched again")
        tree, facts = _checkout(EnvSpec(repo=repo, commit=commit, cache=cache), deadline,
                                cancel, None)
    except _Failed as exc:
        stopped = exc.stopped or (exc.run.stopped if exc.run is not None else None)
        raise FetchFailed("timeout" if stopped else exc.why, exc.message) from None
    return tree, facts["recipe_commit"], os.path.basename(tree) in before


def make(recipe, deadline: float, cancel, user=None) -> Made:
    spec: EnvSpec = recipe.environment
    start = time.time()
    if user is not None and (spec.repo or spec.declared):
        return Made(recipe.cwd, failure=TRIAL_USER)
    try:
        tree, facts = (_checkout(spec, deadline, cancel, user) if spec.repo
                       else (None, {}))
        cwd = os.path.normpath(os.path.join(tree, recipe.cwd)) if tree else recipe.cwd
        if spec.repo and not os.path.isdir(cwd):
            raise _Failed(f"cwd `{recipe.cwd}` is not a directory at commit "
                          f"{facts['recipe_commit'][:12]} of {spec.repo}; fix `cwd`")
        if not spec.declared:  # the worker's own environment; its pins are still news
            own = EnvSpec(requirements=("requirements.txt",))
            return Made(cwd, env=facts, pins=environment.declared(own, tree or cwd))
        pins = environment.declared(spec, tree or cwd)
        built = _environment(spec, tree or cwd, pins, deadline, cancel, user)
    except _Failed as exc:
        phase = _phase(start, False)
        if exc.run is not None and exc.run.stopped:
            return Made(recipe.cwd, phase=phase, run=exc.run)
        return Made(recipe.cwd, phase=phase, failure=exc.message, stopped=exc.stopped)
    phase = _phase(start, built["cached"], built["built_at"], built["build_seconds"])
    bin_dir = os.path.join(built["dir"], "bin")
    # the marker's JSON, as _build wrote it (read back from disk when reused)
    made = cast(Built, {k: v for k, v in built.items() if k != "dir"})
    return Made(cwd, os.path.join(bin_dir, "python"), (bin_dir,), phase,
                {**facts, "environment": made}, pins)


def _phase(start: float, cached: bool, built_at: float | None = None,
           build_seconds: float | None = None) -> Phase:
    end = time.time()
    phase: Phase = {"name": "setup", "start": start, "end": end, "seconds": end - start,
                    "found_by": "recipe-environment", "cached": cached}
    if cached:
        phase["built_at"], phase["build_seconds"] = built_at, build_seconds
    return phase


def _run(argv, cwd, deadline, cancel, user, what: str, **extra) -> Run:
    env = child_env(GIT_TERMINAL_PROMPT="0", UV_PYTHON_DOWNLOADS="never", NO_COLOR="1",
                    PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    run = Run(argv, cwd, env, deadline, cancel, user=user)
    if run.code != 0 or run.stopped:
        # The advice last: a report keeps a message's last 2000 characters.
        raise _Failed(f"{environment.resolver_lines(run.tail())}\n{what}", run)
    return run


def _checkout(spec: EnvSpec, deadline, cancel, user) -> tuple[str, Env]:
    """The repository at its commit, in the cache: (directory, report facts)."""
    assert spec.commit is not None  # worker/recipes.py refuses a repo without its commit
    name = environment.key({"repo": spec.repo})[:16]
    repos, trees = _dirs(spec.cache, "repos", "trees")
    mirror = os.path.join(repos, name + ".git")
    with _locked(mirror + ".lock", deadline, cancel):
        if not os.path.isdir(mirror):
            partial = mirror + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            _run([*GIT, "clone", "--mirror", "--quiet", "--", spec.repo, partial], repos, deadline,
                 cancel, user, f"repo {spec.repo} could not be fetched; check the URL or path "
                 "and that this worker can reach it")
            os.rename(partial, mirror)
        commit = environment.commit_of(mirror, spec.commit)
        if commit is None:
            _run([*GIT, "-C", mirror, "remote", "update", "--prune"], repos, deadline, cancel,
                 user, f"repo {spec.repo} could not be fetched again")
            commit = environment.commit_of(mirror, spec.commit)
        if commit is None:
            raise _Failed(f"commit `{spec.commit}` is not in repo {spec.repo}; give a commit "
                          "hash or tag that `git log` shows there", why="commit")
        tree = os.path.join(trees, f"{name[:12]}-{commit[:12]}")
        if not os.path.isdir(tree):
            partial = tree + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            _run([*GIT, "clone", "--quiet", "--no-checkout", mirror, partial], trees, deadline,
                 cancel, user, "the cached repository could not be cloned")
            _run([*GIT, "-C", partial, "checkout", "--quiet", "--detach", commit], trees,
                 deadline, cancel, user, f"commit {commit[:12]} could not be checked out")
            os.rename(partial, tree)
    for entry in spec.requirements:
        if not environment.on_disk(tree, entry):
            with i18n.using("en"):  # a report's error is the worker's English (notes.py)
                raise _Failed(environment.missing_requirement(entry, spec.commit))
    return tree, {"recipe_repo": spec.repo, "recipe_commit": commit}


def _environment(spec: EnvSpec, base: str, pins: dict, deadline, cancel, user) -> dict:
    try:
        with i18n.using("en"):  # a report's error is the worker's English (notes.py)
            python = environment.interpreter(spec.python) if spec.python else sys.executable
    except EnvironmentProblem as exc:
        raise _Failed(str(exc)) from None
    version = _python_version(python)
    uv = environment.uv_binary()
    torch = _worker_torch() if spec.torch == "worker" else None
    if spec.torch == "worker" and torch is None:
        raise _Failed('torch = "worker", but this worker has no torch installed; install it, '
                      'or set torch = "recipe"')
    files = {e: _digest(base, e) for e in spec.requirements}
    parts = {"python": [python, version], "torch": [spec.torch, torch and torch["version"]],
             "repo": spec.repo, "commit": spec.commit, "requirements": files,
             "packages": list(spec.packages), "builder": "uv" if uv else "pip",
             "base": None if spec.repo else base}
    key = environment.key(parts)
    envs, = _dirs(spec.cache, "envs")
    target = os.path.join(envs, key[:20])
    with _locked(target + ".lock", deadline, cancel):
        found = _read_marker(target)
        if found is None:
            found = _build(spec, base, pins, target, python, version, uv, torch, deadline,
                           cancel, user)
            found["cached"] = False
        else:
            found["cached"] = True
    found["dir"] = target
    return found


def _build(spec, base, pins, target, python, version, uv, torch, deadline, cancel,
           user) -> dict:
    started = time.monotonic()
    shutil.rmtree(target, ignore_errors=True)  # a build a crash left half done
    if uv:
        _run([uv, "venv", "--quiet", "--python", python, target], base, deadline, cancel, user,
             f"a Python {version} environment could not be made")
    else:
        _run([python, "-m", "venv", target], base, deadline, cancel, user,
             f"a Python {version} environment could not be made")
    target_python = os.path.join(target, "bin", "python")
    if torch is not None:
        _link_torch(target, torch["closure"])
    args = []
    for entry in spec.requirements:
        m = PROJECT.fullmatch(entry)
        args += ["-e", base + (m.group(1) or "")] if m else ["-r", os.path.join(base, entry)]
    args += list(spec.packages)
    pin = f"torch=={torch['version'].split('+')[0]}" if torch else None
    if pin:  # every torch requirement is the worker's (pip: a constraint); torch's own
        # small dependencies come from the index, as the environment's own
        with open(os.path.join(target, "trialbot-torch.txt"), "w") as f:
            f.write(pin + "\n")
        args += [pin, "--override" if uv else "-c", os.path.join(target, "trialbot-torch.txt")]
    if args:
        argv = ([uv, "pip", "install", "--python", target_python] if uv
                else [target_python, "-m", "pip", "install", "-q"]) + args
        _run(argv, base, deadline, cancel, user, "the environment's requirements could not be "
             "installed; change the pins in `requirements` or `packages`")
    listed = _run(([uv, "pip", "list", "--format", "json", "--python", target_python] if uv
                   else [target_python, "-m", "pip", "list", "--format", "json"]), base,
                  deadline, cancel, user, "the environment's packages could not be listed")
    marker = {"key": os.path.basename(target), "built_at": time.time(),
              "build_seconds": time.monotonic() - started,
              "builder": _builder_version(uv), "python": version,
              "torch": torch["version"] if torch else None,
              "torch_pins_not_used": (environment.other_torch(pins.get("torch", []),
                                                              torch["version"])
                                      if torch else []),
              "packages": _packages(listed.log)}
    tmp = os.path.join(target, MARKER + ".tmp")
    with open(tmp, "w") as f:  # written last: an environment without it is rebuilt
        json.dump(marker, f)
    os.replace(tmp, os.path.join(target, MARKER))
    return marker


def _read_marker(target: str) -> dict | None:
    found = read_json(os.path.join(target, MARKER))  # no link, no FIFO, bounded
    return found if isinstance(found, dict) and "built_at" in found else None


def _packages(lines: list[str]) -> dict[str, str]:
    """name -> version from `pip list --format json` (one line of JSON among
    the installer's notes); an editable install says so."""
    for line in lines:
        if line.startswith("["):
            try:
                rows = json.loads(line)
            except ValueError:
                continue
            out = {r["name"].lower(): r["version"] + (" (editable)" if r.get(
                "editable_project_location") else "") for r in rows if "name" in r}
            return dict(sorted(out.items())[:MAX_PACKAGES])
    return {}


def _digest(base: str, entry: str) -> str:
    parts: list[str | None] = []
    for n in environment.entry_files(entry):
        try:
            with open(os.path.join(base, n), "rb") as f:
                parts.append(f.read().hex())
        except OSError:
            parts.append(None)
    return environment.key({"entry": entry, "files": parts})


def _python_version(python: str) -> str:
    if python == sys.executable:
        return platform.python_version()
    out = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise _Failed(f"the interpreter {python} does not run: {out.stderr.strip()[-300:]}")
    return out.stdout.strip()


def _builder_version(uv: str | None) -> str:
    if not uv:
        return "pip " + metadata.version("pip") if _has("pip") else "pip"
    out = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or "uv"


def _has(dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


# What is linked besides torch: its CUDA libraries and compiler, gigabytes a
# build must not download again. Its small pure-Python dependencies (sympy,
# filelock, ...) are installed into the environment from the index.
HEAVY = re.compile(r"(nvidia-|cuda-|pytorch-triton|triton$)")


def _worker_torch() -> dict | None:
    """The worker's torch and the heavy distributions it needs, as installed."""
    try:
        torch = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    seen, todo, closure = set(), [torch], []
    while todo:
        dist = todo.pop()
        name = _norm(dist.metadata["Name"])
        if name in seen:
            continue
        seen.add(name)
        if dist is torch or HEAVY.match(name):
            closure.append(dist)
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            named = environment.REQUIREMENT.match(req)
            if named is None:  # not a requirement (PEP 508 names start alphanumeric)
                continue
            dep = named.group(1)
            try:
                todo.append(metadata.distribution(dep))
            except metadata.PackageNotFoundError:
                pass  # a dependency for another platform
    return {"version": torch.version, "closure": closure}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _link_torch(target: str, closure) -> None:
    """The worker's torch seen by the environment: its package folders linked
    into a folder of the environment's own (a .pth file puts it on the path,
    after site-packages) and its metadata copied into site-packages without a
    RECORD, so an installer sees it installed, cannot uninstall it, and puts a
    replacement in site-packages, in front of the links: nothing is ever
    written through a link into the worker's files."""
    site = _site_packages(target)
    side = os.path.join(target, "trialbot-worker-torch")
    os.makedirs(side, exist_ok=True)
    for dist in closure:
        files = dist.files or []
        info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
        if info is None:
            continue
        base = str(dist.locate_file(""))
        for top in sorted({f.parts[0] for f in files}):
            dst = os.path.join(side, top)
            if top.endswith(".dist-info") or top in ("..", "__pycache__") or \
                    os.path.lexists(dst):
                continue
            os.symlink(os.path.join(base, top), dst)
        shutil.copytree(os.path.join(base, info), os.path.join(site, info), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("RECORD", "INSTALLER", "direct_url.json"))
    with open(os.path.join(site, "trialbot-worker-torch.pth"), "w") as f:
        f.write(side + "\n")


def _site_packages(target: str) -> str:
    """The environment's site-packages, found on disk (never by running its
    interpreter as the worker)."""
    found = [d for d in os.listdir(os.path.join(target, "lib")) if d.startswith("python")]
    if len(found) != 1:
        raise _Failed(f"the environment {target} has no single lib/pythonX.Y")
    return os.path.join(target, "lib", found[0], "site-packages")


def _dirs(cache: str, *names: str) -> list[str]:
    out = []
    for name in names:
        path = os.path.join(cache, name)
        os.makedirs(path, exist_ok=True)
        out.append(path)
    return out


class _locked:
    """One build of an environment at a time across trials and workers; a
    trial waiting for another's build still stops at its timeout or cancel."""

    def __init__(self, path: str, deadline: float, cancel):
        self.path, self.deadline, self.cancel = path, deadline, cancel

    def __enter__(self):
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                stopped = ("cancelled" if self.cancel.is_set() else
                           "timeout" if time.monotonic() > self.deadline else None)
                if stopped:
                    os.close(self.fd)
                    raise _Failed(f"{stopped} while another trial was building this "
                                  "environment", stopped=stopped) from None
                time.sleep(0.2)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
