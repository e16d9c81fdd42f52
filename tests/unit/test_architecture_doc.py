"""docs/architecture.md cannot drift from the tree: every package and module
under bot/ and worker/ is named in it by its path, and every bot/ or worker/
path it names exists. Pure file reading, well under a second."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# A path as the page writes it (`bot/trials/queue.py`, `worker/launcher/`), not
# part of a longer one (`docs/worker-api.md`, `tests/bot/...`).
PATH = re.compile(r"(?<![\w./-])((?:bot|worker)/[\w./-]*)")


def named(doc: Path = DOC) -> set[str]:
    """The bot/ and worker/ paths the page names, without a sentence's full stop."""
    text = doc.read_text(encoding="utf-8")
    return {m.rstrip(".") for m in PATH.findall(text) if "*" not in m}


def tree() -> tuple[set[str], set[str]]:
    """(modules, packages): every .py but __init__.py, and every folder holding
    Python, as repository paths; a package ends in '/'."""
    modules, packages = set(), set()
    for top in ("bot", "worker"):
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            if rel.parent != Path(top):
                packages.add(rel.parent.as_posix() + "/")
            if path.name != "__init__.py":
                modules.add(rel.as_posix())
    return modules, packages


def test_every_module_and_package_is_named():
    modules, packages = tree()
    missing = sorted((modules | packages) - named())
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_every_named_path_exists():
    # `bot/store` in the layer diagram is the package, `bot/access` the module
    gone = sorted(p for p in named()
                  if not (ROOT / p).exists() and not (ROOT / f"{p}.py").exists())
    assert not gone, f"docs/architecture.md names paths that do not exist: {', '.join(gone)}"


def test_the_checks_see_a_missing_and_a_stale_path(tmp_path):
    """The two checks above would fail on a page that drifted."""
    page = tmp_path / "architecture.md"
    page.write_text("`bot/trials/queue.py` and `worker/gone.py`, then worker/launcher/.\n"
                    "See docs/worker-api.md and trialbot/x.py.\n")
    found = named(page)
    assert found == {"bot/trials/queue.py", "worker/gone.py", "worker/launcher/"}
    modules, _ = tree()
    assert "bot/trials/command.py" in modules - found
    assert not (ROOT / "worker/gone.py").exists()
