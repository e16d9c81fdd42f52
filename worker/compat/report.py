"""What the static reader found in a repository: frozen, typed, JSON-ready.

The report is data only (kinds, names, file:line); the words people read are
made where it is shown (`worker/cli.py`, `bot/fits/compat.py`), in their language.
`from_json` reads back what `as_json` wrote, so a worker can send it to the bot.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "trialbot.compat/1"
# At most this many items of one kind are kept (the total is counted): a vendored
# copy of transformers has hundreds of `.cuda()` lines, and twenty say as much.
KEEP = 20

# What the code needs from the device (Evidence.kind).
IMPORT = "import"            # a device library: detail is its name (triton, flash_attn, ...)
EXTENSION = "extension"      # a CUDAExtension build: detail is the module it builds
CUDA_SOURCE = "cuda_source"  # a .cu/.cuh file
CUDA_ARCH = "cuda_arch"      # an arch flag in a build (sm_80): detail is "8.0"
CUDA_CALL = "cuda_call"      # .cuda()
CUDA_DEVICE = "cuda_device"  # "cuda" / "cuda:0" as a device
CUDA_ASSERT = "cuda_assert"  # assert torch.cuda.is_available()
BF16 = "bf16"                # torch.bfloat16, "bfloat16", bf16=True
FP8 = "fp8"                  # torch.float8_*, fp8_autocast
FA2_REQUEST = "fa2_request"  # attn_implementation="flash_attention_2", use_flash_attention_2=True
MPS = "mps"                  # torch.backends.mps, "mps" as a device
ROCM = "rocm"                # torch.version.hip, a ROCm requirements file or index, a mention
APPLE = "apple"              # Metal / Apple Silicon named in the docs
KINDS = (IMPORT, EXTENSION, CUDA_SOURCE, CUDA_ARCH, CUDA_CALL, CUDA_DEVICE, CUDA_ASSERT, BF16,
         FP8, FA2_REQUEST, MPS, ROCM, APPLE)


@dataclass(frozen=True)
class Evidence:
    kind: str          # one of KINDS
    detail: str        # the library, extension, arch ("8.0") or the matched text
    file: str          # relative to the repository's root
    line: int          # 1-based; 0 for a whole file (a .cu source)
    # Only on some path: inside try/if, a function's own import, or `"cuda" if
    # torch.cuda.is_available() else ...`. A guarded need does not block a device.
    guarded: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Pin:
    name: str          # the distribution, normalised (PEP 503)
    spec: str          # the version specifier as written ("==2.1.2", ">=4.34", "")
    file: str
    line: int
    group: str = ""    # "" for the main dependencies; an extra or a file's own name
    marker: str = ""   # an environment marker ("python_version < '3.11'")
    url: str = ""      # a direct reference (git+https://...), when there is one

    @property
    def exact(self) -> bool:
        return self.spec.startswith(("==", "===")) and "*" not in self.spec


@dataclass(frozen=True)
class Unread:
    file: str          # relative; "" for the repository itself
    line: int
    why: str           # a code: syntax | encoding | dynamic_import | computed | format | large
    detail: str = ""   # the parser's own words, or the expression


@dataclass(frozen=True)
class Unresolved:
    """A pin the resolver could not satisfy for the target, in uv's own words."""
    name: str
    spec: str
    file: str
    line: int
    # python | platform | source_only | no_version | not_found | conflict | other |
    # requires_python
    # (the repository's own, excluding the target: name "python"); or, for a pin
    # not given to uv: direct_reference | conda | poetry | extra
    why: str
    detail: str = ""   # uv's sentence (and its hint)


@dataclass(frozen=True)
class Resolution:
    """Whether the declared pins resolve for a Python version and platform
    (worker/compat/resolve.py): uv's resolver, nothing installed or built."""
    python: str                                 # "3.12"
    platform: str                               # uv's name: "linux", "x86_64-manylinux_2_28"
    status: str                                 # resolved | unresolved | skipped | no_resolver
    files: tuple[str, ...] = ()                 # each dependency file resolved on its own
    resolved: int = 0                           # packages in the resolutions that succeeded
    problems: tuple[Unresolved, ...] = ()
    left_out: tuple[Unresolved, ...] = ()       # pins not given to uv, each with why
    detail: str = ""                            # why skipped: uv's words, or "timeout"


@dataclass(frozen=True)
class Report:
    root: str                                   # the directory as given
    python_files: int
    pins: tuple[Pin, ...] = ()
    needs: tuple[Evidence, ...] = ()
    unread: tuple[Unread, ...] = ()
    dependency_files: tuple[str, ...] = ()      # what was read for pins
    requires_python: tuple[str, ...] = ()       # "file: >=3.9", each as written
    indexes: tuple[str, ...] = ()               # extra package indexes named (a ROCm wheel index)
    find_links: tuple[str, ...] = ()            # pages of wheel links named (`-f URL`)
    counts: dict[str, int] = field(default_factory=dict)  # kind -> all found (see kept)
    schema: str = SCHEMA
    resolution: Resolution | None = None        # only when asked for (an added key, still /1)

    def of(self, kind: str, detail: str | None = None) -> tuple[Evidence, ...]:
        return tuple(e for e in self.needs
                     if e.kind == kind and (detail is None or e.detail == detail))

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def from_json(data: dict[str, Any]) -> Report:
    """The report `as_json` wrote (ValueError for another schema)."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} report: schema {data.get('schema')!r}")
    return Report(
        root=data["root"], python_files=int(data["python_files"]),
        pins=tuple(Pin(**p) for p in data.get("pins", ())),
        needs=tuple(Evidence(**e) for e in data.get("needs", ())),
        unread=tuple(Unread(**u) for u in data.get("unread", ())),
        dependency_files=tuple(data.get("dependency_files", ())),
        requires_python=tuple(data.get("requires_python", ())),
        indexes=tuple(data.get("indexes", ())), find_links=tuple(data.get("find_links", ())),
        counts=dict(data.get("counts", {})), resolution=_resolution(data.get("resolution")))


def _resolution(data: dict[str, Any] | None) -> Resolution | None:
    if not data:
        return None  # a report from before resolving, or not asked for
    return Resolution(**{**data, "files": tuple(data.get("files", ())),
                         "problems": tuple(Unresolved(**u) for u in data.get("problems", ())),
                         "left_out": tuple(Unresolved(**u) for u in data.get("left_out", ()))})


def kept(found: list[Evidence]) -> tuple[tuple[Evidence, ...], dict[str, int]]:
    """At most KEEP per (kind, detail), unguarded first; and each kind's total found,
    the guarded ones apart ("cuda_call" and "cuda_call:guarded")."""
    counts: dict[str, int] = {}
    per: dict[tuple[str, str], int] = {}
    out: list[Evidence] = []
    for e in sorted(found, key=lambda e: (e.guarded, e.file, e.line)):
        count = e.kind + (":guarded" if e.guarded else "")
        counts[count] = counts.get(count, 0) + 1
        key = (e.kind, e.detail if e.kind in (IMPORT, EXTENSION, CUDA_ARCH) else "")
        if per.get(key, 0) < KEEP:
            per[key] = per.get(key, 0) + 1
            out.append(e)
    out.sort(key=lambda e: (KINDS.index(e.kind), e.file, e.line))
    return tuple(out), counts
