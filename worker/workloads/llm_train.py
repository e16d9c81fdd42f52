"""`llm-train`: the llm-infer decoder trained with AdamW on one fixed synthetic
batch, from a fixed seed, so two configs can be compared by their loss after
the same steps.

- precision: fp32, or bf16/fp16 through torch.autocast (fp16 with a gradient
  scaler); weights and optimizer states stay fp32.
- checkpointing=full: each transformer layer's activations are recomputed in
  the backward pass (torch.utils.checkpoint).
- zero=1: ZeRO-1, torch's ZeroRedundancyOptimizer over `world` ranks (gloo on
  CPU, NCCL on CUDA). The global batch is split over the ranks, so the averaged
  gradient is that of the whole batch and the loss is comparable with world=1.

Rank 0 is the trial's child process and times the phases; ranks 1.. are
spawned from it. A rank that dies ends the trial: the others are killed and
the child exits non-zero with the rank's fate in its output.
"""
from __future__ import annotations

import datetime
import os
import resource
import socket
import sys
import threading
import time
from contextlib import nullcontext

import torch
from torch import multiprocessing as mp
from torch import nn
from torch.nn import functional as F

from worker import notes, stats, windows
from worker.arithmetic import ffn_width
from worker.workloads import Unsupported
from worker.workloads.decoder import Decoder, rotary_tables

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LR = 1e-3
ADAM_STATE_BYTES = 8  # exp_avg + exp_avg_sq, fp32, per parameter


class TrainModel(nn.Module):
    def __init__(self, p: dict, device):
        super().__init__()
        self.decoder = Decoder(p["vocab"], p["hidden"], p["layers"], p["heads"], p["kv_heads"],
                               ffn_width(p))
        cos, sin = rotary_tables(p["hidden"] // p["heads"], p["seq"], device, torch.float32)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.checkpointing = p["checkpointing"] == "full"

    def forward(self, tokens):
        return self.decoder.train_forward(tokens, self.cos, self.sin, self.checkpointing)


def check(p: dict, device: str) -> None:
    if p["world"] > 1 and device == "cuda" and p["world"] > torch.cuda.device_count():
        raise Unsupported(f"world={p['world']} needs {p['world']} GPUs and this worker has "
                          f"{torch.cuda.device_count()}; use world<={torch.cuda.device_count()}")
    if p["world"] > 1 and device == "cpu" and p["world"] > (os.cpu_count() or 1):
        raise Unsupported(f"world={p['world']} ranks on a CPU worker with {os.cpu_count()} "
                          "cores would measure contention, not ZeRO; use fewer ranks")
    if p["precision"] == "fp16" and device == "cpu":
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                torch.ones(2, 2) @ torch.ones(2, 2)
        except RuntimeError as exc:
            raise Unsupported(f"precision=fp16 is not supported on this CPU by torch "
                              f"{torch.__version__} ({exc}); use bf16 or fp32") from None


def optimizer_state_bytes(opt) -> int:
    """Bytes of the optimizer's state tensors on this rank (for ZeRO, the local
    shard's optimizer)."""
    local = getattr(opt, "optim", opt)
    return sum(t.numel() * t.element_size() for state in local.state.values()
               for t in state.values() if torch.is_tensor(t) and t.dim() > 0)


def shard_params(opt) -> int:
    """Parameters whose optimizer state lives on this rank."""
    local = getattr(opt, "optim", opt)
    return sum(p.numel() for group in local.param_groups for p in group["params"])


def make(p: dict, dev) -> nn.Module:
    """The built-in decoder to train (hf-train passes its own `make`)."""
    return TrainModel(p, dev)


def train(rank: int, p: dict, device: str, phase, sync, make=make) -> dict:
    dev = torch.device(device, rank) if device == "cuda" else torch.device(device)
    if device == "cuda":
        torch.cuda.set_device(dev)
    # The interpreter's and torch's own share of host RSS, before the model: what
    # a smaller batch would not shrink.
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with phase("weights"):
        model, opt, params = _weights(rank, p, device, dev, make)
    with phase("data"):
        batch = _batch(rank, p, model, dev)
    losses: list[float] = []
    step = _stepper(p, device, model, opt, batch, sync, losses)
    with phase("warmup"):
        for _ in range(p["warmup"]):
            step()
    with phase("run"):
        t0 = time.perf_counter()
        samples = [step() for _ in range(p["steps"])]
        run_seconds = time.perf_counter() - t0
    return {"run_seconds": run_seconds, "rank": rank, "params": params, "losses": losses,
            "latencies": [s["latency"] for s in samples], "samples": samples,
            "optimizer_state_bytes": optimizer_state_bytes(opt),
            "shard_params": shard_params(opt),
            "host_rss_start": rss_start,
            "host_rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_allocated": (torch.cuda.max_memory_allocated(dev) if device == "cuda"
                               else None)}


def _weights(rank: int, p: dict, device: str, dev, make):
    """The model (DDP-wrapped across ranks), its optimizer and its parameter count."""
    torch.manual_seed(p["seed"])
    model = make(p, dev).to(dev)
    params = sum(t.numel() for t in model.parameters())
    if p["world"] > 1:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[rank] if device == "cuda" else None)
    if p["zero"]:  # the spec allows zero=1 only with world > 1
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt: torch.optim.Optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=LR)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
    return model, opt, params


def _batch(rank: int, p: dict, model, dev) -> tuple:
    """This rank's share of the batch: (inputs, targets), the targets one token on."""
    g = torch.Generator().manual_seed(p["seed"])
    vocab = getattr(getattr(model, "module", model), "vocab", None) or p["vocab"]  # DDP
    tokens = torch.randint(0, vocab, (p["batch"], p["seq"] + 1), generator=g)
    share = p["batch"] // p["world"]
    tokens = tokens[rank * share:(rank + 1) * share].to(dev)
    return tokens[:, :-1], tokens[:, 1:]


def _stepper(p: dict, device: str, model, opt, batch: tuple, sync, losses: list):
    """One timed training step, as a function; each appends its batch's loss."""
    world = p["world"]
    inputs, targets = batch
    use_amp = p["precision"] != "fp32"
    scaler = torch.amp.GradScaler(device, enabled=p["precision"] == "fp16")

    def step() -> dict:
        start, t0 = time.time(), time.perf_counter()
        with torch.autocast(device, dtype=DTYPES.get(p["precision"], torch.float32),
                            enabled=use_amp):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sync()
        seconds = time.perf_counter() - t0
        seen = loss.detach()
        if world > 1:  # each rank saw its share of the batch: the batch's loss is their mean
            import torch.distributed as dist
            dist.all_reduce(seen)
            seen = seen / world
        losses.append(stats.finite(float(seen)))  # null: diverged
        return {"latency": seconds, "t0": start, "t1": time.time()}
    return step


def _init(rank: int, p: dict, device: str, port: int) -> None:
    import torch.distributed as dist
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=p["world"], timeout=datetime.timedelta(seconds=120))


def _rank_main(rank: int, p: dict, device: str, port: int, make=make) -> None:
    """Ranks 1..world-1: the same steps, untimed; results go to rank 0."""
    import torch.distributed as dist
    # OMP_NUM_THREADS is the worker's choice (worker/threads.py), shared by the ranks
    torch.set_num_threads(max(1, torch.get_num_threads() // p["world"]))
    _init(rank, p, device, port)
    result = train(rank, p, device, lambda name: nullcontext(),
                   torch.cuda.synchronize if device == "cuda" else lambda: None, make)
    dist.gather_object(result, None, dst=0)
    dist.destroy_process_group()


def _dead(procs: list) -> str | None:
    """Which spawned rank died, if one did."""
    for rank, proc in enumerate(procs, start=1):
        if proc.exitcode not in (None, 0):
            return f"rank {rank} died with exit code {proc.exitcode}"
    return None


def _stop(procs: list) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.kill()


def _watch(procs: list, done: threading.Event) -> None:
    """A rank that dies would leave the others waiting in a collective: end them all."""
    while not done.wait(0.2):
        if (why := _dead(procs)):
            print(f"{why}; stopping the other ranks", file=sys.stderr, flush=True)
            _stop(procs)
            os._exit(1)


def run(p: dict, trial, make=make) -> dict:
    """`make(p, dev)` builds the model to train: a module-level function, so
    spawned ranks can import it."""
    device = trial.device
    check(p, device)
    world = p["world"]
    if world == 1:
        ranks = [train(0, p, device, trial.phase, trial.sync, make)]
    else:
        import torch.distributed as dist
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.set_num_threads(max(1, torch.get_num_threads() // world))
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_rank_main, args=(r, p, device, port, make), daemon=True)
                 for r in range(1, world)]
        for proc in procs:
            proc.start()
        done = threading.Event()
        threading.Thread(target=_watch, args=(procs, done), daemon=True).start()
        try:
            _init(0, p, device, port)
            mine = train(0, p, device, trial.phase, trial.sync, make)
            gathered: list[dict | None] = [None] * world
            dist.gather_object(mine, gathered, dst=0)
            dist.destroy_process_group()
        except Exception as exc:
            # A collective may fail before the watchdog looks: name the rank that died.
            done.set()
            time.sleep(0.5)  # let the dead rank's exit code show
            why = _dead(procs)
            _stop(procs)
            if why:
                raise RuntimeError(f"{why}; the other ranks were stopped") from exc
            raise
        done.set()
        for proc in procs:
            proc.join(30)
        ranks = [r for r in gathered if r is not None]  # gather_object filled each
    return results(p, ranks)


def results(p: dict, ranks: list[dict]) -> dict:
    lead = ranks[0]
    step = {**stats.summary(lead["latencies"]), "unit": "s",
            "what": "one training step (forward, backward, optimizer) on rank 0, synchronized"}
    tokens = p["batch"] * p["seq"]
    theory = ADAM_STATE_BYTES * lead["params"] / p["world"] if p["zero"] else \
        ADAM_STATE_BYTES * lead["params"]
    theory_note = (notes.message(notes.THEORY_ZERO, world=p["world"]) if p["zero"]
                   else notes.message(notes.THEORY))
    return {
        "headline": {"metric": "step time", "value": step["mean"], "unit": "s"},
        "latency": step,
        # A fixed count of steps: judged against the stated bound (worker/stats.py).
        "stability": stats.fixed_stability(lead["latencies"], lead["run_seconds"]),
        "windows": windows.split(lead.get("samples") or [], "step"),
        "throughput": {"value": tokens / step["mean"], "unit": "tokens/s",
                       "what": "training tokens per second: batch·seq / mean step time"}
        if step["mean"] else None,  # a step too short for the clock: no rate
        "scale": {"batch": p["batch"], "prompt_tokens": p["seq"], "gen_tokens": 0,
                  "tokens_per_request": tokens, "requests": len(lead["latencies"]),
                  "tokens": tokens * len(lead["latencies"])},
        "training": {
            "params": lead["params"], "precision": p["precision"],
            "checkpointing": p["checkpointing"], "zero": p["zero"], "world": p["world"],
            "steps": p["warmup"] + p["steps"], "loss_first": lead["losses"][0],
            "loss_final": lead["losses"][-1], "losses": lead["losses"],
            "optimizer_state_theory_per_rank": theory,
            "theory": notes.english(theory_note),
            "theory_note": theory_note,
            "ranks": [{k: r[k] for k in ("rank", "optimizer_state_bytes", "shard_params",
                                         "host_rss_start", "host_rss_peak", "peak_allocated")}
                      for r in ranks],
        },
    }
