"""GPU memory sizes and bandwidths, for "the largest batch that fits" a named
GPU and the memory-bound decode estimate.

Facts only: each entry is the memory size and peak memory bandwidth printed on
the vendor's public datasheet or spec page (named in `source`). Never prices —
a built-in price list goes stale (docs/design.md §3, "Money"). Where one name covers parts
with different bandwidth (H100 SXM5 3.35 TB/s, H100 PCIe 2 TB/s) the entry
keeps both as a range; where the source prints no bandwidth (A10G, RTX 4090's
spec page) it is None and no time is estimated for that GPU.

Units. Datasheets print "80GB". This table keeps that figure as printed
(`datasheet_gb`) and reads it as decimal gigabytes: `bytes = datasheet_gb ×
10^9` (80 GB = 80×10^9 B = 74.5 GiB). That is a reading, not a measurement:
GPU memory is built from binary-sized chips, part of it is reserved (ECC,
driver, firmware), and the total a given card reports (`nvidia-smi`
memory.total, torch's `total_memory`, a trial report's `env.gpu_memory`) is
the exact figure for that card. For the common parts listed here the decimal
reading is the smaller of the two, so answers err toward fitting less. Give an
exact size instead of a name (`gpu=79.6GiB`, `gpu=81559MiB`) to use the card's
own figure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from bot.states import Json
from worker.i18n import N_, _

GB = 10**9
GIB = 2**30


@dataclass(frozen=True)
class Gpu:
    name: str
    datasheet_gb: float | None  # the size as the datasheet prints it, in "GB"
    bytes: int                  # what the answers use (see the module docstring)
    memory: str                 # memory technology, as the datasheet says
    source: str                 # the public document the size comes from
    note: str = ""              # marked N_: shown as _(note)
    bandwidth_gbs: tuple[float, ...] = ()  # peak memory bandwidth, GB/s (10^9 B/s), as printed
    family: str = ""            # the words a reported name carries (nvidia-smi, torch)
    bf16: bool | None = None    # bfloat16 arithmetic; None: not known (a size the user gave)
    # CUDA compute capability (major, minor) per NVIDIA's CUDA GPUs page (CC_SOURCE);
    # None for AMD parts and sizes the user gave.
    cc: tuple[int, int] | None = None

    @property
    def amd(self) -> bool:
        return _ARCH.get(self.name, "").startswith("AMD")

    @property
    def bf16_source(self) -> str:
        """Why `bf16` says what it says, in the language in use ("" for a given size)."""
        if self.bf16 is None:
            return ""
        arch = _ARCH[self.name]
        return (_("{arch}: BF16 Tensor Core throughput listed", arch=arch) if self.bf16 else
                _("{arch}: the datasheet lists FP16 but no BF16 precision", arch=arch))

    def describe(self) -> str:
        if self.datasheet_gb is None:  # a size the user gave
            return _("{name}: {gib} GiB ({bytes} bytes, as given)", name=self.name,
                     gib=format(self.bytes / GIB, ".2f"), bytes=self.bytes)
        return _("{name}: {gb} GB {memory} per the {source}, read as {gb}×10^9 B = {gib} GiB",
                 name=self.name, gb=format(self.datasheet_gb, "g"), memory=self.memory,
                 source=self.source, gib=format(self.bytes / GIB, ".1f"))


def _gpu(name: str, gb: float, memory: str, source: str, note: str = "",
         bw: tuple[float, ...] = (), family: str = "", bf16: bool = True) -> Gpu:
    # bf16: Volta (V100) and Turing (T4) have none; Ampere and later do (their datasheets
    # and NVIDIA's architecture whitepapers list BF16 Tensor Core throughput).
    return Gpu(name, gb, int(round(gb * GB)), memory, source, note, tuple(bw),
               family or name.split("-")[0], bf16, _CC.get(name))


# Compute capability by part, as NVIDIA's CUDA GPUs page lists it; the Transformer
# Engine support matrix (https://nvidia.github.io/TransformerEngine/support_matrix.html)
# names the same: A100/A10 8.x, L4/L40S 8.9, H100/H200 9.0, B200 10.0.
CC_SOURCE = "NVIDIA CUDA GPUs page (https://developer.nvidia.com/cuda-gpus)"
_CC = {"H100-80GB": (9, 0), "H100-NVL": (9, 0), "H200": (9, 0), "A100-40GB": (8, 0),
       "A100-80GB": (8, 0), "L40S": (8, 9), "L4": (8, 9), "A10": (8, 6), "A10G": (8, 6),
       "RTX-4090": (8, 9), "V100-16GB": (7, 0), "V100-32GB": (7, 0), "T4": (7, 5),
       "B200": (10, 0)}


_ARCH = {"H100-80GB": "Hopper", "H100-NVL": "Hopper", "H200": "Hopper", "A100-40GB": "Ampere",
         "A100-80GB": "Ampere", "L40S": "Ada Lovelace", "L4": "Ada Lovelace", "A10": "Ampere",
         "A10G": "Ampere (GA102, as the A10)", "RTX-4090": "Ada Lovelace", "V100-16GB": "Volta",
         "V100-32GB": "Volta", "T4": "Turing", "B200": "Blackwell",
         "MI300X": "AMD CDNA 3", "MI250X": "AMD CDNA 2"}


_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
_A100_SHEET = "NVIDIA A100 Tensor Core GPU datasheet"
_V100_SHEET = "NVIDIA Tesla V100 GPU datasheet"

# key: canonical name; aliases are normalised (lower case, letters and digits only).
TABLE: dict[str, Gpu] = {g.name: g for g in (
    _gpu("H100-80GB", 80, "HBM3 (SXM5) / HBM2e (PCIe)", _H100_SHEET,
         N_("H100 SXM5 and H100 PCIe both list 80GB; bandwidth 2 TB/s PCIe, 3.35 TB/s SXM5"),
         (2000, 3350)),
    _gpu("H100-NVL", 94, "HBM3", _H100_SHEET, N_("per GPU of the NVL pair"), (3900,), "H100 NVL"),
    _gpu("H200", 141, "HBM3e", "NVIDIA H200 Tensor Core GPU datasheet",
         N_("H200 SXM and H200 NVL both list 141GB and 4.8 TB/s"), (4800,)),
    _gpu("A100-40GB", 40, "HBM2", _A100_SHEET, N_("1,555 GB/s PCIe and SXM"), (1555,)),
    _gpu("A100-80GB", 80, "HBM2e", _A100_SHEET, N_("1,935 GB/s PCIe, 2,039 GB/s SXM"),
         (1935, 2039)),
    _gpu("L40S", 48, "GDDR6 with ECC", "NVIDIA L40S GPU datasheet", bw=(864,)),
    _gpu("L4", 24, "GDDR6", "NVIDIA L4 Tensor Core GPU datasheet", bw=(300,)),
    _gpu("A10", 24, "GDDR6", "NVIDIA A10 Tensor Core GPU datasheet", bw=(600,)),
    _gpu("A10G", 24, "GDDR6", "AWS Amazon EC2 G5 instances page (24 GB per A10G GPU)"),
    _gpu("RTX-4090", 24, "GDDR6X", "NVIDIA GeForce RTX 4090 specifications page", family="4090"),
    _gpu("V100-16GB", 16, "HBM2", _V100_SHEET, bw=(900,), bf16=False),
    _gpu("V100-32GB", 32, "HBM2", _V100_SHEET, bw=(900,), bf16=False),
    _gpu("T4", 16, "GDDR6", "NVIDIA T4 Tensor Core GPU datasheet",
         N_("bandwidth printed as 320+ GB/s"),
         (320,), bf16=False),
    _gpu("B200", 180, "HBM3e", "NVIDIA DGX B200 datasheet (1,440 GB total GPU memory for 8 GPUs)",
         N_("per GPU in DGX/HGX B200; some announcements said 192GB — measure your card; "
            "bandwidth 64 TB/s for 8 GPUs in the same datasheet"), (8000,)),
    _gpu("MI300X", 192, "HBM3", "AMD Instinct MI300X accelerator data sheet", bw=(5300,)),
    _gpu("MI250X", 128, "HBM2e", "AMD Instinct MI250X accelerator data sheet", bw=(3200,)),
)}

_ALIASES = {
    "H100-80GB": ("h100", "h10080", "h10080gb", "h100sxm", "h100sxm5", "h100pcie",
                  "h100sxm80gb", "h100pcie80gb"),
    "H100-NVL": ("h100nvl", "h10094", "h10094gb", "h100nvl94gb"),
    "H200": ("h200", "h200141gb", "h200sxm", "h200nvl", "h200141"),
    "A100-40GB": ("a10040", "a10040gb", "a100sxm40gb", "a100pcie40gb"),
    "A100-80GB": ("a10080", "a10080gb", "a100sxm80gb", "a100pcie80gb"),
    "L40S": ("l40s", "l40s48gb"),
    "L4": ("l4", "l424gb"),
    "A10": ("a10", "a1024gb"),
    "A10G": ("a10g", "a10g24gb"),
    "RTX-4090": ("rtx4090", "4090", "rtx409024gb"),
    "V100-16GB": ("v10016", "v10016gb", "v100sxm216gb", "v100pcie16gb"),
    "V100-32GB": ("v10032", "v10032gb", "v100sxm232gb", "v100pcie32gb"),
    "T4": ("t4", "t416gb"),
    "B200": ("b200", "b200180gb"),
    "MI300X": ("mi300x", "instinctmi300x", "mi300x192gb"),
    "MI250X": ("mi250x", "instinctmi250x", "mi250x128gb"),
}
# Names that mean more than one part with different memory: refused, naming the choices.
_AMBIGUOUS = {"a100": ("A100-40GB", "A100-80GB"), "v100": ("V100-16GB", "V100-32GB")}

_INDEX = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_UNITS = {"gb": GB, "gib": GIB, "mb": 10**6, "mib": 2**20, "tb": 10**12, "tib": 2**40}


def _norm(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "tesla", "geforce"):
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix):]
    return key


def parse_size(text: str) -> int | None:
    """Bytes of "80GiB", "81559MiB", "24GB" (GB = 10⁹, GiB = 2³⁰); None when not a size."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(gb|gib|mb|mib|tb|tib)", text.strip().lower())
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def size_of(raw: str, key: str) -> int:
    """Bytes of a `key=` size (`budget=24GB`, `min_mem=80GiB`); a ValueError names the
    rule broken (the form, the sign, the unit, the range) with an example."""
    values = dict(word=f"{key}={raw}", key=key)
    m = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]*)", raw.strip().lower())
    if not m:
        raise ValueError(_("`{word}`: {key} is a size, a number and its unit (GB, GiB, MB, MiB, "
                           "TB or TiB), e.g. {key}=24GB or {key}=80GiB", **values))
    if float(m.group(1)) < 0:
        raise ValueError(_("`{word}`: {key} cannot be negative, e.g. {key}=24GB", **values))
    if not m.group(2):
        raise ValueError(_("`{word}`: {key} needs a unit (GB, GiB, MB, MiB, TB or TiB), e.g. "
                           "{key}={figure}GB", figure=m.group(1), **values))
    if m.group(2) not in _UNITS:
        raise ValueError(_("`{word}`: `{unit}` is not a unit of size; write GB, GiB, MB, MiB, TB "
                           "or TiB, e.g. {key}=24GB", unit=m.group(2), **values))
    size = int(float(m.group(1)) * _UNITS[m.group(2)])
    if not 2**20 <= size <= 100 * 2**40:
        raise ValueError(_("`{word}`: {key} must be from 1 MiB to 100 TiB, e.g. {key}=24GB",
                           **values))
    return size


class GpuNameError(ValueError):
    def __init__(self, why: str, message: str):
        super().__init__(message)
        self.why = why  # ambiguous | typo | unknown


def lookup(name: str) -> Gpu:
    """A GPU by name (case-insensitive; "H100", "h100-sxm", "A100 80GB", "nvidia l4"),
    or an exact size ("80GiB", "81559MiB", "24GB"). Raises ValueError with a
    message that lists the known names, or the close one for a typo."""
    text = (name or "").strip()
    size = parse_size(text)
    if size is not None:
        if not 2**20 <= size <= 100 * 2**40:
            raise ValueError(_("`{text}`: a GPU memory size must be from 1 MiB to 100 TiB",
                               text=text))
        return Gpu(f"{text} GPU", None, size, "", "given by the user")
    return named(text)


def named(text: str) -> Gpu:
    """A table GPU by one of its names (no sizes): the one table every command
    that takes a GPU name reads (`/trial gpu=`, `/plan set gpu=`, `/plan price`,
    `/trial fit gpu=`, worker registration)."""
    key = _norm(text)
    if key in _INDEX:
        return TABLE[_INDEX[key]]
    if key in _AMBIGUOUS:
        choices = _AMBIGUOUS[key]
        sizes = ", ".join(f"{c} ({TABLE[c].datasheet_gb:g} GB)" for c in choices)
        raise GpuNameError("ambiguous", _("`{text}` is ambiguous: it comes with different "
                                          "memory sizes — say which: {sizes}",
                                          text=text, sizes=sizes))
    close = _close(key)
    known = ", ".join(TABLE)
    if close:
        raise GpuNameError("typo", _(
            "`{text}` is not a GPU I know; did you mean {close}? known: {known}; or give a "
            "size such as `80GiB` or `81559MiB` (what nvidia-smi shows as memory.total)",
            text=text, close=close, known=known))
    raise GpuNameError("unknown", _(
        "`{text}` is not a GPU I know; known: {known}; or give a size such as `80GiB` or "
        "`81559MiB` (what nvidia-smi shows as memory.total)", text=text, known=known))


def _slip(a: str, b: str) -> bool:
    # A letter typed for a digit or a digit for a letter (H10O): a model number with a
    # letter in it names no part. A digit for a digit or a letter for a letter (H800,
    # MI300A, A40) is another part, so it is no slip.
    return a.isdigit() != b.isdigit()


def _near(key: str, alias: str) -> bool:
    """Whether `key` is `alias` typed with slips: one character typed twice (H1000);
    or, at the same length, two neighbouring characters swapped (H010) or one or
    two letter-for-digit swaps (one for names under 5 characters)."""
    if len(key) == len(alias) + 1:  # a dropped one is not a slip: H20 is a real part
        return any(key[i] == key[i + 1] and key[:i] + key[i + 1:] == alias
                   for i in range(len(key) - 1))
    if len(key) != len(alias) or key == alias:
        return False
    diff = [i for i, (a, b) in enumerate(zip(key, alias)) if a != b]
    if len(diff) == 2 and diff[1] == diff[0] + 1 and key[diff[0]] == alias[diff[1]] \
            and key[diff[1]] == alias[diff[0]]:
        return True
    most = 1 if len(key) < 5 else 2
    return len(diff) <= most and all(_slip(key[i], alias[i]) for i in diff)


def _close(key: str) -> str | None:
    """The table name `key` is a misspelling of, by the rule `_near` states; None
    for a name that could be a real part the table lacks (RTX-A6000, H800, L40)."""
    return next((_INDEX[alias] for alias in _INDEX if _near(key, alias)), None)


def listed(name: str) -> bool:
    """Whether `name` is a GPU of the table (by any alias, or a family of it: A100)."""
    return _norm(name) in _INDEX or _norm(name) in _AMBIGUOUS or name in TABLE


def unlisted_note(name: str | None) -> str:
    """What a GPU name the table lacks means, said once where it is kept; "" for a
    table name, `cpu` or none."""
    if not name or name.lower() in ("cpu", "none", "any") or listed(name):
        return ""
    return _("`{name}` is not in the datasheet table, so it is kept as written: trials go "
             "to workers whose reported GPU name has its words, and its memory is unknown, "
             "so no \"fits on\" or largest batch is worked out for it (`/trial fit` takes a "
             "size instead, e.g. `gpu=48GiB`)", name=name)


def canonical(name: str) -> str:
    """The table's name for `name`, or `name` itself when the table has none."""
    try:
        return named(name).name
    except ValueError:
        return name


def family_of(name: str) -> str | None:
    """The kind an ambiguous name stands for (`A100`), for routing where only the
    kind matters; None when `name` is not such a family."""
    key = _norm(name)
    return key.upper() if key in _AMBIGUOUS else None


def identify(reported: str | None, memory: int | None = None) -> Gpu | None:
    """The table entry a reported name ("NVIDIA H100 80GB HBM3", "NVIDIA
    A100-SXM4-40GB") is, by its family words (the most specific family wins: an
    H100 NVL is not an H100-80GB) and, within a family, its size word or memory."""
    have = set(re.findall(r"[a-z0-9]+", (reported or "").lower()))
    found = [g for g in TABLE.values()
             if all(w in have for w in re.findall(r"[a-z0-9]+", g.family.lower()))]
    if not found:
        return None
    most = max(len(g.family.split()) for g in found)
    found = [g for g in found if len(g.family.split()) == most]
    if len(found) > 1:
        sized = [g for g in found if f"{g.datasheet_gb:g}gb" in have]
        if sized:
            return sized[0]
        if memory:  # the nearest datasheet size to what the card reports
            return min(found, key=lambda g: abs(g.bytes - memory))
        return None
    return found[0]


def matches_gpu(report: Json, target: str | None) -> bool | None:
    """Did the trial run on the plan's target GPU kind? None when no target is set."""
    if not target:
        return None
    e = report.get("env") or {}
    if target.lower() in ("cpu", "none"):
        return not e.get("gpu_count")
    if not e.get("gpu_count"):
        return False
    try:  # a table name: the entry the reported name is (H100-80GB is "NVIDIA H100 PCIe")
        want = named(target)
    except ValueError:
        want = None
    if want is not None:
        got = identify(e.get("gpu_name"), e.get("gpu_memory"))
        if got is not None:
            return got == want
    # Whole words: A10 is not an A100, L4 is not an L40S.
    have = set(re.findall(r"[a-z0-9]+", (e.get("gpu_name") or "").lower()))
    words = re.findall(r"[a-z0-9]+", (want.family if want else target).lower())
    return bool(words) and all(w in have for w in words)
