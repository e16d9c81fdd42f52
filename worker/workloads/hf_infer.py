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

from worker import repeat, stats
from worker.workloads import hf, llm_infer
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
            "logits_head": [stats.finite(x) for x in logits[0, :PROBE_LOGITS].tolist()],
            "logits_sd": stats.finite(float(logits[0].std())),
            "what": "prefill logits at the last prompt position, outside the timed phases"}


def run(p: dict, trial) -> dict:
    device = trial.device
    with trial.phase("weights"):
        cfg, source, full, version, import_rss = hf.imported(p["model"], p["layers"])
        model = hf.build(cfg, p["dtype"], device, p["attn"], p["seed"], p["model"]).eval()
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
    return {**llm_infer.results(p, samples, stats.judged(stability), WHAT),
            "quality_probe": probe,
            **hf.described(p, cfg, source, full, version, import_rss)}


WHAT = {"latency": "one request: generate() of the whole batch (prefill + decode), "
                   "synchronized",
        "ttft": "generate() start to the first step's logits (prefill), read by a logits "
                "processor",
        "decode": "one decode step for the whole batch: after the first logits to the end of "
                  "generate(), per later token"}
