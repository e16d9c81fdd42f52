"""llm-infer: batched greedy generation with a KV cache (prefill then decode).

One *request* is the whole batch (scenario=offline) or one sequence
(scenario=single-stream, batch=1): prefill `prompt` tokens, then decode `gen`
tokens. Latency samples are per request; throughput counts generated tokens.
"""
from __future__ import annotations

import time

import torch

from worker import repeat, stats, windows
from worker.arithmetic import ffn_width
from worker.workloads.decoder import Decoder, generate, rotary_tables

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


PROBE_LOGITS = 64  # logits kept from the first sequence, for an A/B comparison


@torch.inference_mode()
def quality_probe(model, prompts, cos, sin) -> dict:
    """What an A/B of two configs (e.g. dtype=fp32,bf16) compares: the prefill's
    next-token choice per sequence and the first sequence's leading logits.
    Same seed, same weights up to the dtype's rounding, same prompts."""
    cache = model.new_cache(prompts.shape[0], prompts.shape[1])
    logits = model(prompts, cache, 0, cos, sin)[:, -1].float()
    return {"first_tokens": logits.argmax(-1).tolist(),
            "logits_head": [stats.finite(x) for x in logits[0, :PROBE_LOGITS].tolist()],
            "logits_sd": stats.finite(float(logits[0].std())),
            "what": "prefill logits at the last prompt position, outside the timed phases"}


def run(p: dict, trial) -> dict:
    dtype = DTYPES[p["dtype"]]
    device = trial.device
    with trial.phase("weights"):
        previous = torch.get_default_dtype()
        torch.manual_seed(p["seed"])
        torch.set_default_dtype(dtype)  # build in the target dtype: no fp32 copy first
        try:
            with torch.device(device):
                model = Decoder(p["vocab"], p["hidden"], p["layers"], p["heads"],
                                p["kv_heads"], ffn_width(p)).eval()
        finally:
            torch.set_default_dtype(previous)
        cos, sin = rotary_tables(p["hidden"] // p["heads"], p["prompt"] + p["gen"],
                                 device, dtype)
    with trial.phase("data"):
        g = torch.Generator().manual_seed(p["seed"])
        prompts = torch.randint(0, p["vocab"], (p["batch"], p["prompt"]), generator=g)
        prompts = prompts.to(device)

    def request():
        t0 = time.perf_counter()
        _, ttft, decode = generate(model, prompts, p["gen"], cos, sin, trial.sync)
        return {"latency": time.perf_counter() - t0, "ttft": ttft,
                "decode": decode / (p["gen"] - 1) if p["gen"] > 1 else None}

    with trial.phase("warmup"):
        for _ in range(p["warmup"]):
            request()
        probe = quality_probe(model, prompts, cos, sin)
    with trial.phase("run"):
        samples, stability = repeat.adaptive(request, p["repeats"], p["stability"] / 100,
                                             p["run_cap"])
    return {**results(p, samples, stats.judged(stability),  # stability=0: still judged
                      WHAT), "quality_probe": probe}


WHAT = {"latency": "one request: prefill + decode of the whole batch, synchronized",
        "ttft": "prefill to first token", "decode": "one decode step for the whole batch"}


def results(p: dict, samples: list[dict], stability: dict, what: dict) -> dict:
    """The report's inference fields from the requests' samples (hf-infer's too):
    `what` says how its latency, ttft and decode step were taken."""
    latencies = [s["latency"] for s in samples]
    per_token = [s["decode"] for s in samples if s["decode"] is not None]
    mean = sum(latencies) / len(latencies)
    latency = {**stats.summary(latencies), "unit": "s", "what": what["latency"]}
    # A request too short for the clock to see has no rate (null, not infinity)
    throughput = {"value": p["batch"] * p["gen"] / mean, "unit": "tokens/s",
                  "what": "generated tokens per second: batch·gen / mean request latency"
                  } if mean > 0 else None
    headline: dict | None
    if p["scenario"] == "single-stream":  # MLPerf's Single-Stream reports the p90 latency
        headline = {"metric": "p90 latency", "value": latency["p90"], "unit": "s"}
    else:  # Offline reports throughput
        headline = throughput and {"metric": "throughput", "value": throughput["value"],
                                   "unit": "tokens/s"}
    return {
        "scenario": p["scenario"],
        "headline": headline,
        "stability": stability,
        "latency": latency,
        "ttft": {**stats.summary([s["ttft"] for s in samples]), "unit": "s",
                 "what": what["ttft"]},
        "decode_per_token": ({**stats.summary(per_token), "unit": "s", "what": what["decode"]}
                             if per_token else None),
        "throughput": throughput,
        "windows": windows.split(samples, "request"),
        "scale": {"batch": p["batch"], "prompt_tokens": p["prompt"], "gen_tokens": p["gen"],
                  "tokens_per_request": p["batch"] * (p["prompt"] + p["gen"]),
                  "requests": len(samples),
                  "tokens": len(samples) * p["batch"] * (p["prompt"] + p["gen"])},
    }
