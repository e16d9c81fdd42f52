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
            return {"code_commit": None, "code_dirty": None,
                    "code_version": "not a git checkout (no commit to record)"}
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"code_commit": None, "code_dirty": None, "code_version": f"git failed: {exc}"}
    commit, dirty = head.stdout.strip(), bool(status.stdout.strip())
    return {"code_commit": commit, "code_dirty": dirty,
            "code_version": commit[:12] + (" (dirty: uncommitted changes)" if dirty else "")}
