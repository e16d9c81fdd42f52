"""The code version of a recipe's working directory: git commit and dirty flag,
so trials of different code are never compared as if they were the same."""
from __future__ import annotations

import subprocess

from worker import redact
from worker.reportparts import CodeVersion

# A tree a trial can write may configure git to run a command (core.fsmonitor,
# hooks): git here runs none, and never with the worker's secrets.
NO_COMMANDS = ("-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null")


def git(cwd: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *NO_COMMANDS, "-C", cwd, *args], capture_output=True,
                              text=True, timeout=timeout,
                              env={**redact.without_secrets(), "GIT_TERMINAL_PROMPT": "0"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(args, 1, "", str(exc))


def of(cwd: str) -> CodeVersion:
    def git_here(*args):
        return git(cwd, *args)
    try:
        head = git_here("rev-parse", "HEAD")
        if head.returncode != 0:
            why = head.stderr.strip().splitlines()[-1] if head.stderr.strip() else ""
            return {"code_commit": None, "code_dirty": None,
                    "code_version": "no commit recorded: " + (
                        "not a git checkout" if "not a git repository" in why else why)}
        # Untracked files change what runs too; a build's egg-info does not.
        status = git_here("status", "--porcelain", "--", ".", ":(exclude)*.egg-info",
                          ":(exclude)**/*.egg-info")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"code_commit": None, "code_dirty": None, "code_version": f"git failed: {exc}"}
    commit, dirty = head.stdout.strip(), bool(status.stdout.strip())
    return {"code_commit": commit, "code_dirty": dirty,
            "code_version": commit[:12] + (" (dirty: uncommitted changes)" if dirty else "")}
