"""hf-infer: greedy generation with a Hugging Face model's own code, random
weights from its config (worker/workloads/hf.py).

The same requests, phases and report fields as llm-infer: one request is the
whole batch (offline) or one sequence (single-stream), prefill `prompt` tokens
and generate exactly `gen` more (EOS cannot stop it early). TTFT and the
per-token time are read inside `generate` by a logits processor, which runs
after each forward and before the next token is chosen.
"""
from __future__ import annotations

import time

import torch

from worker import repeat, stats, windows
from worker.workloads import hf
from worker.workloads.llm_infer import PROBE_LOGITS


def stamps(sync):
    """A logits processor that notes when each step's logits are ready."""
    tf = hf.transformers()

    class Stamp(tf.LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            sync()  # the forward is queued on a GPU: wait for it before the stamp
            self.times.append(time.perf_counter())
            return scores
    return Stamp()


@torch.inference_mode()
def quality_probe(model, prompts) -> dict:
    """As llm-infer's: the prefill's next-token choice and leading logits."""
    logits = model(prompts, logits_to_keep=1).logits[:, -1].float()
    return {"first_tokens": logits.argmax(-1).tolist(),
            "logits_head": logits[0, :PROBE_LOGITS].tolist(),
            "logits_sd": float(logits[0].std()),
            "what": "prefill logits at the last prompt position, outside the timed phases"}


def run(p: dict, trial) -> dict:
    device = trial.device
    with trial.phase("weights"):
        cfg, source, full, version, import_rss = hf.imported(p["model"], p["layers"])
        model = hf.build(cfg, p["dtype"], device, p["attn"], p["seed"]).eval()
    vocab = cfg.get_text_config().vocab_size
    with trial.phase("data"):
        g = torch.Generator().manual_seed(p["seed"])
        prompts = torch.randint(0, vocab, (p["batch"], p["prompt"]), generator=g).to(device)
        mask = torch.ones_like(prompts)
    pad = cfg.get_text_config().pad_token_id
    kwargs = {"max_new_tokens": p["gen"], "min_new_tokens": p["gen"], "do_sample": False,
              "pad_token_id": 0 if pad is None else pad, "attention_mask": mask}
    if p["cache"] == "static":
        kwargs["cache_implementation"] = "static"

    @torch.inference_mode()
    def request():
        stamp = stamps(trial.sync)
        t0 = time.perf_counter()
        out = model.generate(prompts, logits_processor=[stamp], **kwargs)
        trial.sync()
        t1 = time.perf_counter()
        made = out.shape[1] - p["prompt"]
        if made != p["gen"]:
            raise RuntimeError(f"generate made {made} new tokens, not gen={p['gen']}")
        first = stamp.times[0]
        return {"latency": t1 - t0, "ttft": first - t0,
                "decode": (t1 - first) / (p["gen"] - 1) if p["gen"] > 1 else None}

    with trial.phase("warmup"):
        for _ in range(p["warmup"]):
            request()
        probe = quality_probe(model, prompts)
    with trial.phase("run"):
        samples, stability = repeat.adaptive(request, p["repeats"], p["stability"] / 100,
                                             p["run_cap"])
    return {**results(p, samples, stats.judged(stability)), "quality_probe": probe,
            **hf.described(p, cfg, source, full, version, import_rss)}


def results(p: dict, samples: list[dict], stability: dict) -> dict:
    """The llm-infer report fields from the requests' samples."""
    latencies = [s["latency"] for s in samples]
    per_token = [s["decode"] for s in samples if s["decode"] is not None]
    mean = sum(latencies) / len(latencies)
    latency = {**stats.summary(latencies), "unit": "s",
               "what": "one request: generate() of the whole batch (prefill + decode), "
                       "synchronized"}
    throughput = {"value": p["batch"] * p["gen"] / mean, "unit": "tokens/s",
                  "what": "generated tokens per second: batch·gen / mean request latency"}
    if p["scenario"] == "single-stream":
        headline = {"metric": "p90 latency", "value": latency["p90"], "unit": "s"}
    else:
        headline = {"metric": "throughput", "value": throughput["value"], "unit": "tokens/s"}
    return {
        "scenario": p["scenario"], "headline": headline, "stability": stability,
        "latency": latency,
        "ttft": {**stats.summary([s["ttft"] for s in samples]), "unit": "s",
                 "what": "generate() start to the first step's logits (prefill), read by a "
                         "logits processor"},
        "decode_per_token": ({**stats.summary(per_token), "unit": "s",
                              "what": "one decode step for the whole batch: after the first "
                                      "logits to the end of generate(), per later token"}
                             if per_token else None),
        "throughput": throughput,
        "windows": windows.split(samples, "request"),
        "scale": {"batch": p["batch"], "prompt_tokens": p["prompt"], "gen_tokens": p["gen"],
                  "tokens_per_request": p["batch"] * (p["prompt"] + p["gen"]),
                  "requests": len(samples),
                  "tokens": len(samples) * p["batch"] * (p["prompt"] + p["gen"])},
    }
