"""worker/api.py, the bot's one door into the worker: every name it lists is
there, the bot's own imports use no other (lint-imports holds that too), and
the embedded worker's parts load only when asked for."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import worker.api as api

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_name_resolves():
    for name in api.__all__:
        assert getattr(api, name) is not None, name


def test_the_bot_imports_only_listed_names():
    used = set()
    for path in (ROOT / "bot").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "worker.api":
                used |= {a.name for a in node.names}
    assert used <= set(api.__all__), used - set(api.__all__)


def test_the_embedded_worker_loads_on_first_use():
    code = ("import sys, bot.app.runtime, bot.app.cli, worker.api as api\n"
            "assert 'worker.agent' not in sys.modules\n"
            "assert 'worker.launcher' not in sys.modules\n"
            "from worker.api import Agent\n"
            "assert Agent.__module__ == 'worker.agent'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="not_a_name"):
        api.not_a_name  # noqa: B018 - the lookup is the test
