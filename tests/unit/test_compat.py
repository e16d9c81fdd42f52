"""The truth table: nine public inference-acceleration repositories, each
reproduced by a small synthetic tree under tmp_path (their code stays out of
this repository), and the verdict for a T4, an A100, an H100 and a Mac.

TRUTH is what each repository's README and code say (read at the commits named
in docs/compat.md); EXPECTED is the check's verdict. They agree in 8 of 9; the
miss (streaming-llm on a T4) is explained in docs/compat.md.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.fits import compat
from worker import compat as reader

R, C, X = compat.RUNS, compat.CHANGES, compat.CANNOT
KINDS = ("T4", "A100-80GB", "H100", "mac")

FA2_GUARDED = ("from transformers.utils import is_flash_attn_2_available\n"
               "if is_flash_attn_2_available():\n"
               "    from flash_attn import flash_attn_func\n")

REPOS: dict[str, dict[str, str]] = {
    # Speculative decoding. Medusa: fp16 inference, flash_attn only if installed,
    # training with bf16 (README: --bf16 True), eval scripts with .cuda().
    "medusa": {
        "pyproject.toml": '[project]\nname = "medusa-llm"\ndependencies = ["torch", '
                          '"transformers>=4.34"]\n[project.optional-dependencies]\n'
                          'train = ["bitsandbytes"]\n',
        "medusa/model/modeling_llama_kv.py": FA2_GUARDED,
        "medusa/train/train.py": "import torch\nm = load(torch_dtype=torch.bfloat16)\n",
        "llm_judge/gen.py": "import torch\nids = torch.as_tensor([1]).cuda()\n",
    },
    # EAGLE: fp16 on RTX 3090s, a ROCm requirements file, .cuda() in its examples.
    "eagle": {
        "requirements.txt": "torch==2.6.0\ntransformers>=4.53.1\n",
        "requirements-rocm.txt": "--extra-index-url https://download.pytorch.org/whl/rocm6.3\n"
                                 "torch==2.6.0+rocm6.3\n",
        "eagle/model/ea_model.py": "def go(x):\n    return x.cuda()\n",
    },
    # Lookahead decoding: plain path asserts CUDA; its FlashAttention example asks
    # for FA2 (README: FlashAttention optional).
    "lookahead": {
        "requirements.txt": "transformers==4.36.2\ntorch<2.1.1\n",
        "minimal.py": "import torch\nassert torch.cuda.is_available()\ndevice = 'cuda'\n",
        "minimal-flash.py": "m = load(attn_implementation='flash_attention_2')\n",
        "lade/models/modeling_llama.py": FA2_GUARDED,
    },
    # KV-cache compression. SnapKV writes its method into FlashAttention-2's forward
    # (README: flash-attn==2.4.0).
    "snapkv": {
        "pyproject.toml": '[project]\nname = "snapkv"\ndependencies = ["torch"]\n',
        "snapkv/monkeypatch.py": "import transformers\n"
                                 "def replace_llama():\n"
                                 "    transformers.models.llama.modeling_llama."
                                 "LlamaFlashAttention2.forward = fwd\n",
    },
    # KIVI: Triton kernels and its own CUDA extension; its scripts ask for FA2.
    "kivi": {
        "pyproject.toml": '[project]\nname = "kivi"\ndependencies = ["torch==2.4.1", '
                          '"flash-attn"]\n',
        "quant/setup.py": "from torch.utils.cpp_extension import CUDAExtension\n"
                          "setup(ext_modules=[CUDAExtension(name='kivi_gemv', "
                          "sources=['gemv_cuda.cu'])])\n",
        "quant/gemv_cuda.cu": "__global__ void k() {}\n",
        "quant/matmul.py": "import triton\nimport kivi_gemv\n",
        "pred_long_bench.py": "m = load(use_flash_attention_2=True)\n",
    },
    # Attention sinks. streaming-llm: fp16 Llama; Falcon's mask cast to bf16.
    "streaming_llm": {
        "setup.py": "from setuptools import setup\nsetup(name='streaming_llm')\n",
        "streaming_llm/utils.py": "import torch\nm = load(torch_dtype=torch.float16)\n",
        "streaming_llm/modify_falcon.py": "import torch\n"
                                          "def mask(m):\n    return m.to(torch.bfloat16)\n",
        "examples/eval_long_ppl.py": "device = 'cuda'\n",
    },
    # Quantisation. llm-awq: its CUDA kernels and FlashAttention-2, both imported.
    "llm_awq": {
        "pyproject.toml": '[project]\nname = "awq"\ndependencies = ["torch==2.3.0"]\n',
        "awq/kernels/setup.py": "from torch.utils.cpp_extension import CUDAExtension\n"
                                "setup(ext_modules=[CUDAExtension(name='awq_inference_engine',"
                                " sources=['gemm.cu'])])\n",
        "awq/kernels/gemm.cu": "",
        "tinychat/modules/fused_attn.py": "import awq_inference_engine\n"
                                          "from flash_attn import flash_attn_func\n",
    },
    # GPTQ: pure torch on cuda:0; the 3-bit kernel imported only if built.
    "gptq": {
        "setup_cuda.py": "from torch.utils import cpp_extension\nsetup(ext_modules="
                         "[cpp_extension.CUDAExtension('quant_cuda', ['k.cu'])])\n",
        "quant_cuda_kernel.cu": "",
        "quant.py": "try:\n    import quant_cuda\nexcept ImportError:\n    pass\n",
        "test_kernel.py": "import quant_cuda\n",
        "modelutils.py": "import torch\nDEV = torch.device('cuda:0')\n",
    },
    # Runs on CPU and Metal: llama.cpp's bindings, no torch.
    "llama_cpp_python": {
        "pyproject.toml": '[project]\nname = "llama_cpp_python"\ndependencies = '
                          '["numpy>=1.20.0"]\n',
        "README.md": "Build with Metal on Apple Silicon, or CUDA.\n",
        "llama_cpp/llama.py": "import ctypes\n",
    },
}

TRUTH = {
    "medusa": (C, R, R, C), "eagle": (R, R, R, C), "lookahead": (C, R, R, C),
    "snapkv": (X, R, R, X), "kivi": (C, R, R, X), "streaming_llm": (R, R, R, C),
    "llm_awq": (X, R, R, X), "gptq": (R, R, R, C), "llama_cpp_python": (R, R, R, R),
}
# The one miss: bf16 on Falcon's path reads as "float16 on a T4" (docs/compat.md).
EXPECTED = dict(TRUTH, streaming_llm=(C, R, R, C))


def build(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    for rel, body in REPOS[name].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def statuses(root: Path) -> tuple[str, ...]:
    found = compat.verdicts(reader.read(root), tuple(compat.target(k) for k in KINDS))
    return tuple(v.status for v in found)


@pytest.mark.parametrize("name", sorted(REPOS))
def test_each_repository_gets_its_verdicts(tmp_path, name):
    assert statuses(build(tmp_path, name)) == EXPECTED[name]


def test_the_check_matches_the_truth_in_at_least_seven_of_eight(tmp_path):
    matches = sum(statuses(build(tmp_path, n)) == TRUTH[n] for n in REPOS)
    assert matches / len(REPOS) >= 7 / 8, matches


def test_a_reason_names_its_evidence_and_its_source(tmp_path):
    found = compat.verdict(reader.read(build(tmp_path, "llm_awq")), compat.target("T4"))
    flash = [x for x in found.reasons if "flash_attn" in x.text]
    assert flash and flash[0].status == X
    assert flash[0].where == ("tinychat/modules/fused_attn.py:2",)
    assert "Dao-AILab/flash-attention" in flash[0].text


def test_guarded_imports_block_no_device(tmp_path):
    # gptq's kernel is imported inside try (and by its test): a Mac needs only the device.
    found = compat.verdict(reader.read(build(tmp_path, "gptq")), compat.target("mac"))
    assert [x.status for x in found.reasons] == [C]
    assert found.reasons[0].where == ("modelutils.py:2",)


def test_fp8_and_hopper_only_kernels(tmp_path):
    root = tmp_path / "fp8"
    root.mkdir()
    (root / "run.py").write_text("import torch\nimport flash_attn_interface\n"
                                 "w = x.to(torch.float8_e4m3fn)\n")
    report = reader.read(root)
    got = {k: compat.verdict(report, compat.target(k)).status
           for k in ("L4", "A100-80GB", "H100", "B200", "MI300X", "cpu")}
    # FP8 needs 8.9 (L4 has it); FlashAttention-3 is Hopper's alone.
    assert got == {"L4": X, "A100-80GB": X, "H100": R, "B200": X, "MI300X": X, "cpu": X}


def test_rocm_keeps_cuda_device_names_but_not_cuda_kernels(tmp_path):
    eagle = reader.read(build(tmp_path, "eagle"))
    assert compat.verdict(eagle, compat.target("MI300X")).status == R
    awq = reader.read(build(tmp_path, "llm_awq"))
    # FlashAttention-2 has a ROCm build; llm-awq's own .cu kernels do not.
    reasons = compat.verdict(awq, compat.target("MI300X")).reasons
    assert [x.status for x in reasons] == [X] and "CUDA kernels" in reasons[0].text


def test_every_kind_of_the_table_has_a_verdict(tmp_path):
    found = compat.verdicts(reader.read(build(tmp_path, "llama_cpp_python")))
    names = [v.target.name for v in found]
    assert names[-2:] == ["Mac", "CPU"] and "T4" in names and "MI250X" in names
    assert all(v.status == R for v in found)
    assert compat.lines(found)[0] == "H100-80GB (cuda): runs as it is"


def test_kernels_built_only_for_newer_gpus(tmp_path):
    root = tmp_path / "arch"
    (root / "k").mkdir(parents=True)
    (root / "k" / "setup.py").write_text(
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "flags = ['-gencode=arch=compute_80,code=sm_80', '-gencode=arch=compute_90,code=sm_90']\n"
        "setup(ext_modules=[CUDAExtension('kern', ['a.cu'], extra_compile_args=flags)])\n")
    (root / "run.py").write_text("import kern\n")
    report = reader.read(root)
    t4 = compat.verdict(report, compat.target("T4"))
    assert t4.status == X and "8.0" in t4.reasons[0].text
    assert t4.reasons[0].where == ("k/setup.py:2",)
    assert compat.verdict(report, compat.target("A10")).status == R
