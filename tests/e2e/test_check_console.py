"""`/plan NAME check` in `trialbot console` (#34): the console's own worker
fetches a local git repository and reads it; the answer is printed in the
plan's channel, and `show` and `advise` read it."""
import os
import subprocess

from conftest import BIN, ROOT

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def test_a_plan_checks_its_repository_in_the_console(tmp_path):
    repo = tmp_path / "awq"
    (repo / "awq").mkdir(parents=True)
    (repo / "requirements.txt").write_text("torch==2.3.0\n")
    (repo / "awq" / "quant.py").write_text("import torch\nimport awq_inference_engine\n"
                                           "x = torch.zeros(1).cuda()\n")
    (repo / "setup.py").write_text(
        "from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        "setup(name='awq', ext_modules=[CUDAExtension('awq_inference_engine', "
        "['kernels/gemm.cu'], extra_compile_args={'nvcc': ['-gencode', "
        "'arch=compute_80,code=sm_80']})])\n")
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "awq"], check=True)
    done = subprocess.run(
        [str(BIN / "trialbot"), "console", "--db", str(tmp_path / "c.db")],
        input="\n".join([f"/plan new awq gpu=T4 platform=cuda repo={repo}", "/plan awq check",
                         "/plan awq show"]) + "\n",
        capture_output=True, text=True, cwd=ROOT, timeout=240,
        # a worker that may not reach an index: the pins are skipped, and said so
        env=dict(os.environ, TRIALBOT_ENV_CACHE=str(tmp_path / "cache"), UV_OFFLINE="1",
                 UV_CACHE_DIR=str(tmp_path / "uv-cache")))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Compatibility check C1 of *awq*" in out and "is asked of a worker" in out
    assert "*Target T4*: cannot run" in out and "compute capability 8.0" in out
    assert "needs_cuda = yes" in out and "framework = torch==2.3.0" in out
    assert "Pins not resolved for Python" in out and "could not be reached" in out
    assert "*Compatibility* (check C1," in out and "T4 cannot run." in out  # show, after it
