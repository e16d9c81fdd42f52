"""The repository's files, sorted by what reads them: Python, dependency files,
CUDA sources, and the docs whose words say which platforms it supports."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from worker.compat import deps
from worker.compat import report as r
from worker.compat.report import Evidence, Unread

# Not the repository's own code: version control, environments, build output.
SKIP = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".tox", ".nox",
        "node_modules", "site-packages", "build", "dist", ".eggs", ".mypy_cache"}
LARGEST = 2_000_000  # bytes: a generated Python file this big is named, not parsed
DOCS = re.compile(r"^(readme|install|installation)[^/]*\.(md|rst|txt)$|^readme$", re.IGNORECASE)
ROCM_WORDS = re.compile(r"\brocm\b", re.IGNORECASE)
APPLE_WORDS = re.compile(r"apple silicon|\bmetal\b|\bmps\b|macos", re.IGNORECASE)


@dataclass
class Files:
    python: list[Path] = field(default_factory=list)
    dependency: list[Path] = field(default_factory=list)
    cuda: list[Path] = field(default_factory=list)
    docs: list[Path] = field(default_factory=list)
    unread: list[Unread] = field(default_factory=list)


def walk(root: Path) -> Files:
    files = Files()
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = sorted(here.iterdir())
        except OSError as exc:
            files.unread.append(Unread(_rel(root, here), 0, "unreadable", exc.strerror or ""))
            continue
        for entry in entries:
            if entry.is_symlink():
                continue  # may point out of the repository, or round in a loop
            if entry.is_dir():
                if entry.name not in SKIP and not entry.name.endswith(".egg-info"):
                    stack.append(entry)
                continue
            _sort(entry, root, files)
    return files


def _sort(entry: Path, root: Path, files: Files) -> None:
    name = entry.name
    if name.endswith(".py"):
        files.python.append(entry)
    elif name.endswith((".cu", ".cuh")):
        files.cuda.append(entry)
    elif DOCS.match(name) and len(entry.relative_to(root).parts) <= 2:
        files.docs.append(entry)
    if deps.is_dependency_file(name):
        files.dependency.append(entry)
        if "rocm" in name.lower():
            files.docs.append(entry)  # a ROCm requirements file is support stated


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() if path != root else ""


def text(root: Path, path: Path) -> tuple[str, Unread | None]:
    rel = _rel(root, path)
    try:
        if path.stat().st_size > LARGEST:
            return "", Unread(rel, 0, "large", f"{path.stat().st_size} bytes")
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError as exc:
        return "", Unread(rel, 0, "encoding", str(exc))
    except OSError as exc:
        return "", Unread(rel, 0, "unreadable", exc.strerror or "")


def sources(root: Path, cuda: list[Path]) -> list[Evidence]:
    return [Evidence(r.CUDA_SOURCE, p.suffix, _rel(root, p), 0) for p in sorted(cuda)]


def mentions(root: Path, docs: list[Path]) -> list[Evidence]:
    """ROCm and Apple named in the README and install notes, one line each."""
    out: list[Evidence] = []
    for path in docs:
        body, problem = text(root, path)
        if problem:
            continue
        if "rocm" in path.name.lower():
            out.append(Evidence(r.ROCM, path.name, _rel(root, path), 0))
        for number, line in enumerate(body.splitlines(), 1):
            for kind, words in ((r.ROCM, ROCM_WORDS), (r.APPLE, APPLE_WORDS)):
                m = words.search(line)
                if m:
                    out.append(Evidence(kind, m.group(0), _rel(root, path), number))
    return out
