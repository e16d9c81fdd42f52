"""Will the repository run there? A verdict per GPU kind from the static reader's
report (`worker/compat/`): *runs*, *runs with changes* (which) or *cannot* (why),
each reason with its evidence (file:line) and the rule's source.

Pure: a report and the GPU table in, verdicts out. The rules are the libraries'
and NVIDIA's own documents (RULES, below; docs/compat.md). Static reading
cannot see a kernel chosen at run time or a dependency's own needs: a short
trial on the target is what confirms a verdict (rule 1 of the advice).
"""
from __future__ import annotations

from dataclasses import dataclass

from bot.fits import gpus
from worker.api import compat
from worker.i18n import _

R = compat.report
RUNS, CHANGES, CANNOT = "runs", "changes", "cannot"
_ORDER = {RUNS: 0, CHANGES: 1, CANNOT: 2}
SHOWN = 3  # places named per reason; the rest are counted

FA_README = "https://github.com/Dao-AILab/flash-attention (README)"
TE_MATRIX = "https://nvidia.github.io/TransformerEngine/support_matrix.html"
HIP_NOTES = "https://pytorch.org/docs/stable/notes/hip.html"


@dataclass(frozen=True)
class Rule:
    """What a device library needs: the lowest compute capability (None: none
    stated), Hopper only, whether it builds for ROCm, and where that is said."""
    min_cc: tuple[int, int] | None
    source: str
    rocm: bool = False
    hopper_only: bool = False
    apple: str = ""  # a version that adds Apple Silicon and other backends


RULES = {
    # "FlashAttention-2 ... supports Ampere, Ada, or Hopper GPUs"; a ROCm build for MI200/MI300.
    "flash_attn": Rule((8, 0), FA_README, rocm=True),
    # "FlashAttention-3 ... Requirements: H100 / H800 GPU".
    "flash_attn_3": Rule((9, 0), FA_README, hopper_only=True),
    # Triton's README: "NVIDIA GPUs (Compute Capability 7.0+)", AMD GPUs.
    "triton": Rule((7, 0), "https://github.com/triton-lang/triton (README)", rocm=True),
    # "GPU: compute capability 7.5 or higher"; ROCm 6.3+ for MI200/MI300.
    "vllm": Rule((7, 5), "https://docs.vllm.ai/en/latest/getting_started/installation/gpu/",
                 rocm=True),
    # "NVIDIA GPUs with Compute Capability 6.0+"; AMD, Intel, Apple Silicon from 0.50.
    "bitsandbytes": Rule((6, 0), "https://huggingface.co/docs/bitsandbytes/v0.50.0/installation",
                         apple="0.50"),
    "transformer_engine": Rule((8, 0), TE_MATRIX),
    "xformers": Rule(None, "https://github.com/facebookresearch/xformers (README)"),
    "apex": Rule(None, "https://github.com/NVIDIA/apex (README)"),
    "deepspeed_ops": Rule(None, "https://www.deepspeed.ai/tutorials/advanced-install/"),
}


@dataclass(frozen=True)
class Target:
    name: str
    platform: str                       # cuda | rocm | mps | cpu
    cc: tuple[int, int] | None = None


@dataclass(frozen=True)
class Reason:
    status: str                         # changes | cannot
    text: str                           # in the language in use
    where: tuple[str, ...] = ()         # file:line, at most SHOWN
    more: int = 0                       # places found beyond those


@dataclass(frozen=True)
class Verdict:
    target: Target
    status: str
    reasons: tuple[Reason, ...] = ()


def targets() -> tuple[Target, ...]:
    """Every kind of the GPU table, then a Mac (MPS) and a CPU."""
    out = [Target(g.name, "rocm" if g.amd else "cuda", g.cc) for g in gpus.TABLE.values()]
    return (*out, Target("Mac", "mps"), Target("CPU", "cpu"))


def target(name: str) -> Target:
    """A target by name: a table GPU, `mac`/`mps` or `cpu` (ValueError as lookup's)."""
    key = name.strip().lower()
    if key in ("mac", "mps", "apple"):
        return Target("Mac", "mps")
    if key == "cpu":
        return Target("CPU", "cpu")
    g = gpus.named(name)
    return Target(g.name, "rocm" if g.amd else "cuda", g.cc)


def verdicts(report: compat.Report, kinds: tuple[Target, ...] | None = None
             ) -> tuple[Verdict, ...]:
    return tuple(verdict(report, t) for t in (kinds or targets()))


def verdict(report: compat.Report, t: Target) -> Verdict:
    reasons = [*_libraries(report, t), *_builds(report, t), *_dtypes(report, t),
               *_attention(report, t), *_hardcoded(report, t)]
    status = max((x.status for x in reasons), key=_ORDER.__getitem__, default=RUNS)
    reasons.sort(key=lambda x: -_ORDER[x.status])
    return Verdict(t, status, tuple(reasons))


def _hard(report: compat.Report, kind: str, detail: str | None = None) -> list[R.Evidence]:
    return [e for e in report.of(kind, detail) if not e.guarded]


def _reason(status: str, text: str, found: list[R.Evidence], total: int | None = None
            ) -> Reason:
    places = tuple(dict.fromkeys(e.where for e in found))
    count = len(places) if total is None else total
    return Reason(status, text, places[:SHOWN], max(0, count - SHOWN))


def _cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def _arch(detail: str) -> tuple[int, int]:
    major, _dot, minor = detail.partition(".")
    return int(major), int(minor or 0)


def _libraries(report: compat.Report, t: Target) -> list[Reason]:
    out = []
    for lib, rule in RULES.items():
        found = _hard(report, R.IMPORT, lib)
        if found:
            out += _library(lib, rule, found, t)
    return out


def _library(lib: str, rule: Rule, found: list[R.Evidence], t: Target) -> list[Reason]:
    if t.platform == "cuda" and t.cc is not None:
        if rule.hopper_only and t.cc[0] != 9:
            return [_reason(CANNOT, _("`{lib}` is imported: it runs on Hopper GPUs (compute "
                                      "capability 9.0) only; {kind} is {cc} (source: {source})",
                                      lib=lib, kind=t.name, cc=_cc(t.cc), source=rule.source),
                            found)]
        if rule.min_cc and t.cc < rule.min_cc:
            return [_reason(CANNOT, _("`{lib}` is imported: it needs compute capability {need} "
                                      "or newer; {kind} is {cc} (source: {source})", lib=lib,
                                      need=_cc(rule.min_cc), kind=t.name, cc=_cc(t.cc),
                                      source=rule.source), found)]
        return []
    if t.platform == "rocm" and rule.rocm:
        return []
    if rule.apple and t.platform in ("mps", "rocm"):
        return [_reason(CHANGES, _("`{lib}` is imported: install version {version} or newer, "
                                   "the first with {platform} support (source: {source})",
                                   lib=lib, version=rule.apple, platform=t.platform,
                                   source=rule.source), found)]
    return [_reason(CANNOT, _("`{lib}` is imported: it is a CUDA library, and {platform} is not "
                              "among the platforms its documents name (source: {source})",
                              lib=lib, platform=t.platform, source=rule.source), found)]


def _builds(report: compat.Report, t: Target) -> list[Reason]:
    """The repository's own CUDA kernels: needed unless every import of them is guarded."""
    built = report.of(R.EXTENSION)
    needed = [e for e in built if not e.detail
              or not report.of(R.IMPORT, f"extension:{e.detail}")
              or _hard(report, R.IMPORT, f"extension:{e.detail}")]
    sources = report.of(R.CUDA_SOURCE)
    if not needed and (built or not sources):
        return []
    found = needed or list(sources)
    if t.platform == "cuda":
        archs = list(report.of(R.CUDA_ARCH))
        lowest = min((_arch(e.detail) for e in archs), default=None)
        if lowest and t.cc is not None and t.cc < lowest:
            return [_reason(CANNOT, _("its CUDA kernels are built for compute capability {need} "
                                      "and newer only; {kind} is {cc}", need=_cc(lowest),
                                      kind=t.name, cc=_cc(t.cc)), archs)]
        return []
    if t.platform == "rocm" and report.of(R.ROCM):
        return [_reason(CHANGES, _("its own CUDA kernels must be built for ROCm (it names ROCm "
                                   "at {where})", where=report.of(R.ROCM)[0].where), found)]
    return [_reason(CANNOT, _("it builds its own CUDA kernels (.cu sources), which run on "
                              "NVIDIA GPUs only"), found, report.counts.get(R.CUDA_SOURCE)
                    if not needed else None)]


def _dtypes(report: compat.Report, t: Target) -> list[Reason]:
    out = []
    fp8 = _hard(report, R.FP8)
    if fp8 and (t.platform != "cuda" or (t.cc or (0, 0)) < (8, 9)):
        out.append(_reason(CANNOT, _("it computes in FP8, which needs an NVIDIA GPU of compute "
                                     "capability 8.9 or newer (source: {source})",
                                     source=TE_MATRIX), fp8))
    bf16 = _hard(report, R.BF16)
    if bf16 and t.platform == "cuda" and (t.cc or (0, 0)) < (8, 0):
        out.append(_reason(CHANGES, _("use float16 where it sets bfloat16: bf16 needs compute "
                                      "capability 8.0 or newer, {kind} is {cc} (source: {source})",
                                      kind=t.name, cc=_cc(t.cc or (0, 0)), source=TE_MATRIX),
                           bf16))
    return out


def _attention(report: compat.Report, t: Target) -> list[Reason]:
    found = _hard(report, R.FA2_REQUEST)
    if not found or (t.platform == "cuda" and (t.cc or (0, 0)) >= (8, 0)):
        return []
    patched = [e for e in found if e.detail == compat.code.PATCHES_FA2]
    if patched and t.platform != "rocm":
        return [_reason(CANNOT, _("its method is written into FlashAttention-2's forward, which "
                                  "needs an NVIDIA GPU of compute capability 8.0 or newer "
                                  "(source: {source})", source=FA_README), patched)]
    return [_reason(CHANGES, _("load the model with `attn_implementation=\"sdpa\"` (or "
                               "\"eager\") instead of FlashAttention-2, which needs compute "
                               "capability 8.0 or newer (source: {source})", source=FA_README),
                    found)]


def _hardcoded(report: compat.Report, t: Target) -> list[Reason]:
    """`.cuda()`, `device="cuda"`, `assert torch.cuda.is_available()`: a Mac or a CPU
    needs them changed; ROCm's PyTorch keeps the `cuda` names (HIP_NOTES)."""
    if t.platform not in ("mps", "cpu"):
        return []
    found = [*_hard(report, R.CUDA_ASSERT), *_hard(report, R.CUDA_CALL),
             *_hard(report, R.CUDA_DEVICE)]
    if not found:
        return []
    total = sum(report.counts.get(k, 0) for k in (R.CUDA_ASSERT, R.CUDA_CALL, R.CUDA_DEVICE))
    return [_reason(CHANGES, _("replace the hard-coded CUDA device with `{device}` (`.cuda()`, "
                               "`\"cuda\"`, asserts that CUDA is available)",
                               device=t.platform), found, max(total, len(found)))]


def status_word(status: str) -> str:
    return {RUNS: _("runs as it is"), CHANGES: _("runs with changes"),
            CANNOT: _("cannot run")}[status]


def lines(found: tuple[Verdict, ...]) -> list[str]:
    """The verdicts as plain lines: one per kind, its reasons beneath."""
    out = []
    for v in found:
        out.append(f"{v.target.name} ({v.target.platform}): {status_word(v.status)}")
        for reason in v.reasons:
            where = ", ".join(reason.where)
            if reason.more:
                where += _(" and {count} more", count=reason.more)
            out.append(f"  - {reason.text}" + (f" [{where}]" if where else ""))
    return out
