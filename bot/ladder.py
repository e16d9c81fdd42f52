"""The optimization ladder (DESIGN §5): precision → activation checkpointing →
ZeRO-1, each step on top of the previous, measured as trials and judged by the
loss after the same steps from the same seed. Pure: specs in, table and
recommendation out."""
from __future__ import annotations

from bot import gpus
from worker import spec as specs
from worker.summary import gib

STEPS = ("baseline", "precision", "checkpointing", "zero-1")
QUALITY_TOLERANCE = 0.01  # relative to the fp32 baseline's final loss
REFERENCES = {
    "precision": "NVIDIA AMP: mixed precision up to 3× faster on Tensor Core GPUs",
    "checkpointing": "full-layer recomputation ≈30% more compute per layer (Megatron Bridge "
                     "docs); selective recomputation: 70% less activation memory for 2.7% more "
                     "FLOPs (GPT-3, via HF Accelerate's Megatron-LM guide)",
    "zero-1": "ZeRO-1 divides optimizer-state memory by the data-parallel degree "
              "(Adam in mixed precision: 12 bytes/param, 1.5B params → 18 GB → 2.25 GB on 8 ranks)",
}
USAGE = "/trial ladder llm-train batch=8 seq=512 [precision=bf16] [world=2] [budget=24GB]"


def size(raw: str) -> int:
    value = gpus.parse_size(raw)
    if not value:
        raise specs.SpecError(f"budget={raw}", f"`budget={raw}` is not a size; write e.g. "
                              "budget=24GB or budget=80GiB", USAGE)
    return value


def parse(words: list[str]) -> tuple[list[tuple[str, specs.TrialSpec, str]], int | None]:
    """`llm-train k=v ... [budget=24GB]` → the ladder's trials, each parsed as a
    single trial would be, and the memory budget in bytes (or None)."""
    if not words or words[0] != "llm-train":
        raise specs.SpecError(" ".join(words[:1]) or "ladder", "the ladder runs the training "
                              "workload: `/trial ladder llm-train ...`", USAGE)
    given = dict(w.partition("=")[::2] for w in words[1:] if "=" in w)
    budget = size(given.pop("budget")) if "budget" in given else None
    for fixed in ("checkpointing", "zero"):
        if fixed in given:
            raise specs.SpecError(f"{fixed}={given[fixed]}", f"`{fixed}=`: the ladder sets it "
                                  "itself, one step at a time; leave it out", USAGE)
    precision = given.pop("precision", "bf16")
    if precision == "fp32":
        raise specs.SpecError("precision=fp32", "`precision=fp32`: the ladder's first step "
                              "lowers precision from the fp32 baseline; give bf16 or fp16", USAGE)
    world = given.pop("world", "2")
    rest = [f"{k}={v}" for k, v in given.items()]
    for w in words[1:]:
        if "=" not in w:
            raise specs.SpecError(w, f"`{w}`: parameters are written key=value", USAGE)
    steps = [("baseline", ["precision=fp32", "checkpointing=none", "zero=0", "world=1"]),
             ("precision", [f"precision={precision}", "checkpointing=none", "zero=0", "world=1"]),
             ("checkpointing", [f"precision={precision}", "checkpointing=full", "zero=0",
                                "world=1"]),
             ("zero-1", [f"precision={precision}", "checkpointing=full", "zero=1",
                         f"world={world}"])]
    out = []
    for name, extra in steps:
        one = ["llm-train", *rest, *extra]
        out.append((name, specs.parse(one), " ".join(one)))
    return out, budget


def peak(report: dict) -> tuple[int | None, str]:
    """The step's peak memory per rank (the largest rank), and how it was measured."""
    ranks = (report.get("training") or {}).get("ranks") or []
    allocated = [r["peak_allocated"] for r in ranks if r.get("peak_allocated")]
    if allocated:
        return max(allocated), "torch allocator peak allocated, largest rank"
    rss = [r["host_rss_peak"] for r in ranks if r.get("host_rss_peak")]
    if rss:
        return max(rss), "host max RSS (getrusage), largest rank"
    return None, "not measured"


def rows(names: list[str], reports: list[dict | None]) -> list[dict]:
    base = reports[0] if reports and reports[0] and reports[0]["status"] == "ok" else None
    base_loss = base["training"]["loss_final"] if base else None
    out, prev = [], None
    for name, r in zip(names, reports):
        if not r or r["status"] != "ok":
            err = (r or {}).get("error") or {}
            out.append({"step": name, "ok": False,
                        "why": f"{err.get('class', 'not run')}: "
                               f"{(err.get('message') or '').strip().splitlines()[-1:] or ''}"})
            continue
        mem, method = peak(r)
        t = r["training"]
        row = {"step": name, "ok": True, "trial": r.get("trial"), "memory": mem,
               "method": method, "seconds": r["latency"]["mean"], "loss": t["loss_final"],
               "steps": t["steps"], "world": t["world"], "layers": r["params"].get("layers")}
        if base_loss is not None:
            row["quality"] = (t["loss_final"] - base_loss) / base_loss
            row["quality_ok"] = abs(row["quality"]) <= QUALITY_TOLERANCE
        for ref, key in ((prev, "prev"), (base, "base")):
            if ref is not None and ref is not r:
                ref_mem, ref_method = peak(ref)
                row[f"dmem_{key}"] = (mem - ref_mem) / ref_mem if (
                    mem and ref_mem and ref_method == method) else None
                row[f"dtime_{key}"] = row["seconds"] / ref["latency"]["mean"] - 1
        if name == "zero-1":
            row["zero"] = [(x["rank"], x["optimizer_state_bytes"]) for x in t["ranks"]]
            row["zero_theory"] = t["optimizer_state_theory_per_rank"]
        out.append(row)
        prev = r
    return out


def recommend(table: list[dict], budget: int | None) -> list[str]:
    """Adopt a step when it saves what it claims and quality holds; go on while
    the run still exceeds the budget; when nothing fits, say what to change."""
    lines, adopted = [], []
    current = table[0] if table and table[0]["ok"] else None
    if current is None:
        return ["The baseline did not run, so no step can be judged; fix it first."]
    if budget is not None and current["memory"] and current["memory"] <= budget:
        return [f"The baseline already fits the budget ({gib(current['memory'])} ≤ "
                f"{gib(budget)}): adopt nothing for memory's sake."]
    for row in table[1:]:
        if not row["ok"]:
            lines.append(f"{row['step']}: did not run ({row['why']}); not adopted.")
            continue
        if not row.get("quality_ok", False):
            lines.append(f"{row['step']}: quality broke (loss {row['quality']:+.2%} against "
                         f"the fp32 baseline, tolerance ±{QUALITY_TOLERANCE:.0%}): not adopted, "
                         "whatever it saves.")
            continue
        saves = row.get("dmem_prev") is not None and row["dmem_prev"] < 0
        faster = row.get("dtime_prev") is not None and row["dtime_prev"] < 0
        if saves or faster:
            adopted.append(row["step"])
            current = row
            cost = (f", at {row['dtime_prev']:+.0%} step time"
                    if row.get("dtime_prev") and not faster else "")
            lines.append(f"{row['step']}: adopt — "
                         + ", ".join(x for x in (
                             f"{-row['dmem_prev']:.0%} less memory" if saves else "",
                             f"{-row['dtime_prev']:.0%} faster" if faster else "") if x)
                         + cost + ", quality held.")
        else:
            lines.append(f"{row['step']}: saved neither memory nor time here; not adopted.")
        if budget is not None and current["memory"] and current["memory"] <= budget:
            lines.append(f"Fits the budget after {', '.join(adopted)}: {gib(current['memory'])} "
                         f"≤ {gib(budget)}. Stop here.")
            return lines
    if budget is not None and current["memory"]:
        over = current["memory"] - budget
        lines.append(f"Nothing fits {gib(budget)}: the best is {gib(current['memory'])} "
                     f"({gib(over)} over). Redefine the goal: a smaller batch or sequence "
                     "(activation memory scales with batch·seq), fewer layers (each layer's "
                     f"weights and states are ~1/{current['layers']} of the model's), or a GPU with at least {gib(current['memory'])} "
                     "(`/trial fit` after a sweep says which batch fits which GPU).")
    return lines
