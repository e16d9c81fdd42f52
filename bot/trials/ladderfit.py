"""What would make a ladder step fit its memory budget (docs/design.md §5): the
trained model's parameter counts, the bytes that do not grow with batch or
sequence, the activations per sequence measured between two steps, and the
goal changes predicted from them (batch, sequence, layers, a bigger GPU).
Pure: table rows in, numbers and the recommendation's lines out."""
from __future__ import annotations

from bot.fits import gpus
from bot.states import Json
from worker.api import arithmetic, units
from worker.i18n import N_, _

ADAM_BYTES = 8  # exp_avg + exp_avg_sq, fp32, per parameter


def joined(items: list[str], both: str) -> str:
    """`a and b and c`, each pair a message (`both`, from N_) a language words its own way."""
    out = items[0]
    for item in items[1:]:
        out = _(both, first=out, second=item)
    return out


AND, OR = N_("{first} and {second}"), N_("{first} or {second}")


def counts(r: Json) -> Json:
    """The trained model's parameters: all of them as the trial counted them,
    one layer's by the decoder's arithmetic or (hf-train) transformers' sizing."""
    s = (r.get("full_depth") or {}).get("sizing")
    if s is None:
        return arithmetic.weight_params(r["params"])
    return {"total": r["training"]["params"], "per_layer": sum(s["layer_params"]) / s["layers"]}


def fixed_bytes(p: Json, world: int, count: Json | None = None) -> tuple[int, int]:
    """Bytes that do not grow with batch or sequence, by arithmetic: fp32 weights
    (4 B/param), fp32 gradients (4) and AdamW's two moments (8, ÷ world under
    ZeRO-1). Returns (all of them, one transformer layer's share). `count`:
    the trial's own parameter counts (counts()); else the decoder's arithmetic."""
    count = count or arithmetic.weight_params(p)
    per_param = 8 + ADAM_BYTES / (world if p.get("zero") else 1)
    return int(count["total"] * per_param), int(count["per_layer"] * per_param)


def per_sequence(table: list[Json]) -> int | None:
    """Activation bytes per sequence on a rank, measured: the checkpointing step
    (world 1, the whole batch) less the ZeRO-1 step (batch/world per rank), less
    the optimizer states ZeRO-1 moved off the rank by arithmetic. The runtime's
    share cancels; what the ranks add (DDP, gloo) makes it smaller, so a batch
    predicted from it errs toward fitting less. None without both steps."""
    ok = {r["step"]: r for r in table if r["ok"]}
    a, z = ok.get("checkpointing"), ok.get("zero-1")
    if not (a and z and a["memory"] and z["memory"] and a["method"] == z["method"]):
        return None
    world, batch = z["world"], z["params"]["batch"]
    total = (z.get("counts") or arithmetic.weight_params(z["params"]))["total"]
    moved = ADAM_BYTES * total * (1 - 1 / world)
    value = int((a["memory"] - z["memory"] - moved) / (batch - batch / world))
    return value if value > 0 else None


def goal(row: Json, budget: int, per_seq: int | None = None) -> Json:
    """What would fit `budget` if the goal changed, predicted from the measured
    peak. Activations on the rank are `per_seq` × its sequences when measured
    (see per_sequence), else the peak less the runtime's own share (host RSS
    before the model; none for the GPU allocator) and the fixed bytes. They are
    taken as linear in the rank's batch and in seq. Attention that materialises
    its scores grows faster than linearly in seq, and fewer layers keep all the
    activations, so those answers err toward fitting less. None for a value that
    nothing makes fit; no activations when they come out at or below zero."""
    p, mem, runtime = row["params"], row["memory"], row.get("runtime") or 0
    bf16 = "bf16" in (p.get("precision"), p.get("dtype"))
    count = row.get("counts") or arithmetic.weight_params(p)
    fixed, per_layer = fixed_bytes(p, row["world"], count)
    share = p["batch"] // row["world"]
    rest = per_seq * share if per_seq else mem - fixed - runtime
    out = {"fixed": fixed, "runtime": runtime, "activations": rest, "per_seq": per_seq,
           "bytes_per_param": fixed / count["total"],
           "per_layer": per_layer, "batch": None, "seq": None, "layers": None,
           # the smallest GPU that holds it and can run its bf16 (V100 and T4 cannot)
           "bf16": bf16,
           "gpu": min((g for g in gpus.TABLE.values() if g.bytes >= mem
                       and not (bf16 and g.bf16 is False)),
                      key=lambda g: g.bytes, default=None)}
    over = mem - budget
    if rest > 0 and over < rest:
        keep = (rest - over) / rest  # the share of the activations that may stay
        out["batch"] = int(share * keep) * row["world"] or None
        out["seq"] = int(p["seq"] * keep) or None
    if rest > 0:
        layers = p["layers"] - -(-over // per_layer)  # drop whole layers until it fits
        out["layers"] = layers if layers >= 1 else None
    return out


def redefine(row: Json, budget: int, per_seq: int | None = None) -> list[str]:
    """`goal`'s numbers as the recommendation's lines, each with its basis."""
    p, mem, g = row["params"], row["memory"], goal(row, budget, per_seq)
    out = []
    if g["activations"] <= 0:
        values = {"peak": units.size(mem), "fixed": units.size(g["fixed"])}
        out.append(_("(the measured peak {peak} leaves nothing for activations once the "
                     "weights', gradients' and states' {fixed} and the runtime are taken out, "
                     "so no prediction is made from it)", **values) if g["runtime"] else
                   _("(the measured peak {peak} leaves nothing for activations once the "
                     "weights', gradients' and states' {fixed} are taken out, so no prediction "
                     "is made from it)", **values))
    else:
        sizes = {"peak": units.size(mem), "fixed": units.size(g["fixed"]),
                 "per_param": f"{g['bytes_per_param']:g}",
                 "activations": units.size(g["activations"])}
        basis = (_("{per_seq} of activations per sequence, measured as the checkpointing "
                   "step's peak less the ZeRO-1 step's (fewer sequences per rank) less the "
                   "states ZeRO-1 moved off the rank", per_seq=units.size(g["per_seq"]))
                 if g["per_seq"] else
                 _("the peak {peak} less {fixed} of weights, gradients and AdamW states "
                   "({per_param} B/param) and {runtime} of runtime (host RSS before the model) "
                   "leaves {activations} taken as activations",
                   runtime=units.size(g["runtime"]), **sizes) if g["runtime"] else
                 _("the peak {peak} less {fixed} of weights, gradients and AdamW states "
                   "({per_param} B/param) leaves {activations} taken as activations", **sizes))
        options = [_("{key}={value} (now {now})", key=k, value=g[k], now=p[k])
                   for k in ("batch", "seq") if g[k]]
        out.append(_("{options} predicted to fit: {basis}, linear in batch·seq",
                     options=joined(options, OR), basis=basis) if options else
                   _("no smaller batch or sequence fits: {over} over is more than the rank's "
                     "{activations} of activations ({basis})", over=units.size(mem - budget),
                     activations=units.size(g["activations"]), basis=basis))
        out.append(_("layers={layers} (now {now}) predicted to fit: each layer holds "
                     "{per_layer} of weights, gradients and states; activations kept as "
                     "measured", layers=g["layers"], now=p["layers"],
                     per_layer=units.size(g["per_layer"])) if g["layers"] else
                   _("fewer layers alone cannot fit: all {layers} layers' weights, gradients "
                     "and states are {total}, and it is {over} over (their activations taken "
                     "as kept)", layers=p["layers"],
                     total=units.size(g["per_layer"] * p["layers"]),
                     over=units.size(mem - budget)))
    out.append(bigger_gpu(g, mem, "host" in row["method"]))
    return [f"  – {x}" for x in out] + ["  " + _("(predictions, not measurements: run the "
                                                 "ladder again with the change to confirm)")]


def bigger_gpu(g: Json, mem: int, host: bool) -> str:
    """The smallest GPU of the datasheet table that holds `mem` (and does bf16 when
    the run is bf16); a host-memory peak is said to be one."""
    gpu = g["gpu"]
    if not gpu:
        return _("no GPU in the datasheet table holds {peak} on one card", peak=units.size(mem))
    values = {"peak": units.size(mem), "gpu": gpu.name, "gb": f"{gpu.datasheet_gb:g}"}
    if g["bf16"] and host:
        return _("a bigger GPU: the smallest in the datasheet table above {peak} that does "
                 "bf16 (V100 and T4 do not) is {gpu} ({gb} GB) — measured as host memory on a "
                 "CPU worker; a GPU's peak differs, so run the ladder on a GPU worker before "
                 "renting", **values)
    if g["bf16"]:
        return _("a bigger GPU: the smallest in the datasheet table above {peak} that does "
                 "bf16 (V100 and T4 do not) is {gpu} ({gb} GB)", **values)
    if host:
        return _("a bigger GPU: the smallest in the datasheet table above {peak} is {gpu} "
                 "({gb} GB) — measured as host memory on a CPU worker; a GPU's peak differs, "
                 "so run the ladder on a GPU worker before renting", **values)
    return _("a bigger GPU: the smallest in the datasheet table above {peak} is {gpu} "
             "({gb} GB)", **values)
