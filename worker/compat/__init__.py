"""A repository read without running it: what it declares it depends on, and
what its code needs from the device, each with file:line (docs/compat.md).

Pure over a directory on disk: no network, no Slack, nothing executed.
`read(path)` walks the tree once; `worker/compat/deps.py` reads the dependency
files, `worker/compat/code.py` the Python, `worker/compat/tree.py` the rest
(.cu sources, the docs' mentions of ROCm and Apple); `worker/compat/report.py`
is the result. The verdict per GPU kind is the bot's (`bot/fits/compat.py`).
"""
from __future__ import annotations

import gc
from pathlib import Path

from worker.compat import code, deps, tree
from worker.compat import report as r
from worker.compat.report import Evidence, Report, Unread


class CheckError(ValueError):
    """A path that cannot be read as a repository: `why` says which case."""

    def __init__(self, why: str, path: str) -> None:
        super().__init__(f"{why}: {path}")
        self.why = why      # missing | not_directory
        self.path = path


def read(path: str | Path) -> Report:
    root = Path(path)
    if not root.exists():
        raise CheckError("missing", str(path))
    if not root.is_dir():
        raise CheckError("not_directory", str(path))
    files = tree.walk(root)
    found: list[Evidence] = []
    unread: list[Unread] = list(files.unread)
    dep = deps.read(root, files.dependency)
    unread += dep.unread
    # Each syntax tree is freed by reference counting once its file is scanned (an AST
    # has no cycles); the collector's passes over millions of nodes only cost time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        scans, unread_code = _scans(root, files.python)
    finally:
        if collecting:
            gc.enable()
    unread += unread_code
    for scan in scans:
        found += scan.found
        unread += scan.unread
    found += _extension_imports(scans)
    found += tree.sources(root, files.cuda)
    found += tree.mentions(root, files.docs)
    found += [Evidence(r.ROCM, f"package index {url}", "", 0)
              for url in (*dep.indexes, *dep.find_links) if "rocm" in url.lower()]
    needs, counts = r.kept(found)
    return Report(root=str(path), python_files=len(files.python), pins=tuple(dep.pins),
                  needs=needs, unread=tuple(sorted(unread, key=lambda u: (u.file, u.line))),
                  dependency_files=tuple(dep.files), requires_python=tuple(dep.requires_python),
                  indexes=tuple(dep.indexes), find_links=tuple(dep.find_links), counts=counts)


def _scans(root: Path, python: list[Path]) -> tuple[list[code.Scan], list[Unread]]:
    """Each file scanned once, the statements without a clue (code.CLUES) not walked.
    The files that may build an extension go first: what they build is a clue too."""
    texts, unread = [], []
    for file in python:
        text, problem = tree.text(root, file)
        if problem:
            unread.append(problem)
        else:
            texts.append((file.relative_to(root).as_posix(), text))
    builders = [(rel, text) for rel, text in texts if any(word in text for word in code.BUILDS)]
    scans = {rel: code.scan(rel, text, code.clues()) for rel, text in builders}
    built = tuple(sorted({e.detail for s in scans.values() for e in s.found
                          if e.kind == r.EXTENSION and e.detail}))
    words = code.clues(built)
    for rel, text in texts:
        # A builder is read again when it names what is built: it may import it too.
        if rel not in scans or any(name in text for name in built):
            scans[rel] = code.scan(rel, text, words)
    return [scans[rel] for rel, _ in texts], unread


def _extension_imports(scans: list[code.Scan]) -> list[Evidence]:
    """Each import of a module the repository's own CUDA build makes, as an import of
    that extension: guarded or not, as the import is (`try: import quant_cuda`)."""
    built = {e.detail for s in scans for e in s.found if e.kind == r.EXTENSION and e.detail}
    return [Evidence(r.IMPORT, f"extension:{i.module.split('.')[0]}", i.file, i.line, i.guarded)
            for s in scans for i in s.imports
            if i.module.split(".")[0] in built and "." not in i.module]
