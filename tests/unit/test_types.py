"""The type checker's settings (pyproject.toml's [tool.mypy]): mypy runs in
.ci/run over bot/ and worker/; no module of them is let off its errors."""
from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_of_bot_or_worker_is_let_off_its_type_errors():
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert mypy["files"] == ["bot", "worker"]
    let_off = [o["module"] for o in mypy.get("overrides", []) if o.get("ignore_errors")]
    assert let_off == []
