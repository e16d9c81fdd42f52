"""Every benchmark script still imports what it uses, run as a user runs it
(its own process, only what the script puts on sys.path): they run by hand,
not in the suite, so a moved module would otherwise break them unseen."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("bench_*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_script_imports(path, tmp_path):
    # top level only: main() is not called
    done = subprocess.run([sys.executable, "-c", "import runpy, sys; "
                           f"runpy.run_path({str(path)!r}, run_name='imported')"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
