"""The static reader (worker/compat/): dependency files read without running
them, what it could not read named, the report's JSON, and
`trialbot-worker check PATH` on bad input."""
from __future__ import annotations

import json
from pathlib import Path

from worker import cli
from worker import compat as reader
from worker.compat import code
from worker.compat import report as r


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def pins(report: r.Report) -> dict[str, tuple[str, str, int, str]]:
    return {p.name: (p.spec, p.file, p.line, p.group) for p in report.pins}


def test_every_dependency_file_is_read_with_its_lines(tmp_path):
    report = reader.read(tree(tmp_path, {
        "requirements.txt": "# pinned\ntorch==2.1.2  # cu121\n--extra-index-url "
                            "https://download.pytorch.org/whl/rocm6.3\n"
                            "flash-attn>=2.5 ; platform_system == 'Linux'\n"
                            "-e git+https://github.com/x/lm-eval.git@c9bb#egg=lm_eval\n",
        "requirements-dev.txt": "pytest \\\n  >=8\n",
        "setup.py": "from setuptools import setup\nREQS = ['numpy<2', 'Triton==2.1.0']\n"
                    "setup(install_requires=REQS, python_requires='>=3.9',\n"
                    "      extras_require={'train': ['deepspeed']})\n",
        "setup.cfg": "[options]\npython_requires = >=3.8\ninstall_requires =\n    einops\n",
        "pyproject.toml": '[project]\nrequires-python = ">=3.10"\ndependencies = [\n'
                          '  "transformers==4.43.1",\n]\n',
        "environment.yml": "name: x\nchannels: [pytorch]\ndependencies:\n  - python=3.10\n"
                           "  - pytorch::pytorch=2.1.0=py3.10_cuda12.1\n  - pip:\n"
                           "    - accelerate==0.25.0\n",
        "run.py": "import torch\n",
    }))
    got = pins(report)
    assert got["torch"] == ("==2.1.2", "requirements.txt", 2, "")
    assert got["flash-attn"][:3] == (">=2.5", "requirements.txt", 4)
    assert got["lm-eval"][:3] == ("", "requirements.txt", 5)
    assert got["pytest"] == (">=8", "requirements-dev.txt", 1, "requirements-dev.txt")
    assert got["triton"] == ("==2.1.0", "setup.py", 3, "")
    assert got["deepspeed"][3] == "train"
    assert got["einops"][:2] == ("", "setup.cfg")
    assert got["transformers"] == ("==4.43.1", "pyproject.toml", 4, "")
    assert got["pytorch"] == ("=2.1.0", "environment.yml", 5, "conda")
    assert got["accelerate"] == ("==0.25.0", "environment.yml", 7, "pip")
    assert [p.exact for p in report.pins if p.name == "torch"] == [True]
    assert report.indexes == ("https://download.pytorch.org/whl/rocm6.3",)
    assert set(report.requires_python) == {"setup.py: >=3.9", "setup.cfg: >=3.8",
                                           "pyproject.toml: >=3.10",
                                           "environment.yml: =3.10"}
    assert report.of(r.ROCM) and report.unread == ()


def test_what_it_could_not_read_is_named(tmp_path):
    report = reader.read(tree(tmp_path, {
        "pyproject.toml": "[project\nname = 'x'\n",
        "requirements.txt": "torch==2.1.2\ntorch>=>2\n",
        "setup.py": "from setuptools import setup\n"
                    "setup(install_requires=open('requirements.txt').read().splitlines())\n",
        "old.py": "print 'python 2'\n",
        "plugins.py": "import importlib\nmod = importlib.import_module(name)\n",
    }))
    got = {(u.file, u.why) for u in report.unread}
    assert got == {("pyproject.toml", "format"), ("requirements.txt", "format"),
                   ("setup.py", "computed"), ("old.py", "syntax"),
                   ("plugins.py", "dynamic_import")}
    line = {u.file: u.line for u in report.unread}
    assert line["requirements.txt"] == 2 and line["setup.py"] == 2
    assert pins(report)["torch"][0] == "==2.1.2"  # the good line is kept


def test_needs_are_read_with_where_and_whether_guarded(tmp_path):
    report = reader.read(tree(tmp_path, {
        "a.py": "import torch\nx = torch.zeros(1).cuda()\n"
                "d = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                "if x.device.type == 'cuda':\n    pass\n"
                "choices = ['cuda', 'cpu']\n"
                "if torch.backends.mps.is_available():\n    y = x.to('mps')\n",
        "b.py": "def f():\n    import xformers.ops\n",
        "tests/test_k.py": "import triton\n",
        "kern/k.cuh": "",
    }))
    got = {(e.kind, e.detail, e.where, e.guarded) for e in report.needs}
    assert got == {("cuda_call", ".cuda()", "a.py:2", False),
                   ("cuda_device", "'cuda'", "a.py:3", True),
                   ("mps", "torch.backends.mps", "a.py:7", False),
                   ("mps", "'mps'", "a.py:8", False),
                   ("import", "xformers", "b.py:2", True),
                   ("import", "triton", "tests/test_k.py:1", True),
                   ("cuda_source", ".cuh", "kern/k.cuh", False)}
    assert report.python_files == 3


def test_the_report_round_trips_through_json(tmp_path):
    report = reader.read(tree(tmp_path, {"requirements.txt": "torch==2.1.2\n",
                                         "a.py": "import flash_attn\n"}))
    data = json.loads(json.dumps(report.as_json()))
    assert data["schema"] == "trialbot.compat/1"
    assert r.from_json(data) == report


def test_a_vendored_flood_keeps_the_unguarded_and_counts_the_rest(tmp_path):
    body = "def f(x):\n    if x.is_cuda:\n        x.cuda()\n" * 30 + "y.cuda()\n"
    report = reader.read(tree(tmp_path, {"big.py": body}))
    calls = report.of(r.CUDA_CALL)
    assert len(calls) == r.KEEP and [c.line for c in calls if not c.guarded] == [91]
    assert report.counts == {"cuda_call": 1, "cuda_call:guarded": 30}


def test_check_prints_the_report_and_its_json(tmp_path, capsys):
    root = tree(tmp_path, {"requirements.txt": "torch==2.1.2\n", "a.py": "import triton\n"})
    assert cli.main(["check", str(root)]) == 0
    out = capsys.readouterr().out
    assert "torch==2.1.2  (requirements.txt:1)" in out
    assert "imports triton: a.py:1" in out and "A short trial on the target" in out
    assert cli.main(["check", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pins"][0]["name"] == "torch"


def test_check_answers_bad_input_by_name(tmp_path, capsys):
    assert cli.main(["check", str(tmp_path / "nowhere")]) == 2
    assert "`" + str(tmp_path / "nowhere") + "` does not exist" in capsys.readouterr().err
    (tmp_path / "f.txt").write_text("x")
    assert cli.main(["check", str(tmp_path / "f.txt")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert cli.main(["check"]) == 2
    assert "usage: `trialbot-worker check PATH [--json] [--python 3.12]" in capsys.readouterr().err
    empty = tree(tmp_path / "docs", {"README.md": "words\n"})
    assert cli.main(["check", str(empty)]) == 1
    assert "No Python code here" in capsys.readouterr().out
    broken = tree(tmp_path / "broken", {"pyproject.toml": "[project\n", "a.py": "x = 1\n"})
    assert cli.main(["check", str(broken)]) == 1
    out = capsys.readouterr().out
    assert "pyproject.toml: it is not valid for its format: fix that line" in out


def test_statements_without_a_clue_are_skipped_but_nothing_found_is_lost(tmp_path):
    # The reader walks only statements naming a clue (code.CLUES): a clue in a decorator,
    # at a long statement's end, or an import of what the repository's own build makes
    # must still be found; a file with no clue is still parsed, so Python 2 is named.
    model = ("import os\n\n\nclass Model:\n    def plain(self):\n        return os.sep\n\n"
             "    @torch.autocast('cuda')\n    def forward(self):\n        return 2\n\n"
             "    def kernel(self):\n        import awq_inference_engine\n\n\n"
             "x = dict(a=1,\n         b=torch.bfloat16)\n")
    root = tree(tmp_path, {
        "setup.py": "CUDAExtension('awq_inference_engine', sources=['k.cu'],\n"
                    "              extra_compile_args=['-gencode=arch=compute_80,code=sm_80'])\n",
        "model.py": model, "legacy.py": "print 'hello'\n"})
    report = reader.read(root)
    where = {(e.kind, e.detail, e.where, e.guarded) for e in report.needs}
    assert ("cuda_device", "'cuda'", "model.py:8", False) in where
    assert ("import", "extension:awq_inference_engine", "model.py:13", True) in where
    assert ("bf16", "torch.bfloat16", "model.py:17", False) in where
    assert ("cuda_arch", "8.0", "setup.py:2", False) in where
    assert [(u.file, u.why) for u in report.unread] == [("legacy.py", "syntax")]
    words = code.clues(("awq_inference_engine",))
    assert code.scan("model.py", model, words).found == code.scan("model.py", model).found


def test_find_links_are_kept_apart_from_indexes_and_odd_shapes_are_named(tmp_path):
    report = reader.read(tree(tmp_path, {
        "requirements.txt": "-f https://download.pytorch.org/whl/torch_stable.html\n"
                            "--extra-index-url https://example.org/simple\n"
                            "torch==1.13.1+cu117\n",
        "pyproject.toml": "[project]\noptional-dependencies = []\n",
        "a.py": "import os\n"}))
    assert report.find_links == ("https://download.pytorch.org/whl/torch_stable.html",)
    assert report.indexes == ("https://example.org/simple",)
    assert [(u.file, u.why) for u in report.unread] == [("pyproject.toml", "format")]
    assert r.from_json(json.loads(json.dumps(report.as_json()))).find_links == report.find_links
