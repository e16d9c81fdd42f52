"""The code version of a recipe's working directory: git commit and dirty flag,
so trials of different code are never compared as if they were the same."""
from __future__ import annotations

import subprocess


def of(cwd: str) -> dict:
    def git(*args):
        return subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True,
                              timeout=20)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            why = head.stderr.strip().splitlines()[-1] if head.stderr.strip() else ""
            return {"code_commit": None, "code_dirty": None,
                    "code_version": "no commit recorded: " + (
                        "not a git checkout" if "not a git repository" in why else why)}
        status = git("status", "--porcelain")  # untracked files change what runs too
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"code_commit": None, "code_dirty": None, "code_version": f"git failed: {exc}"}
    commit, dirty = head.stdout.strip(), bool(status.stdout.strip())
    return {"code_commit": commit, "code_dirty": dirty,
            "code_version": commit[:12] + (" (dirty: uncommitted changes)" if dirty else "")}
