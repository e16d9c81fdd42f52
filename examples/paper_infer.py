#!/usr/bin/env python3
"""An example "paper's inference script" for recipes: it knows nothing of
trialbot except that it prints TRIALBOT_PHASE lines (optional). It loads
weights from a checkpoint file, reads a tokenised data file, and runs batches,
like the scripts in a paper's repository do.

    python paper_infer.py --batch 4 --seq 256 --batches 3 [--device auto] [--dtype fp32]
"""
import argparse
import os
import tempfile
import time

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    args = ap.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    vocab = 8192
    with tempfile.TemporaryDirectory(prefix="paper-") as work:
        run(args, device, dtype, vocab, work)


def run(args, device, dtype, vocab, work) -> None:
    print("TRIALBOT_PHASE weights", flush=True)
    model = nn.Sequential(nn.Embedding(vocab, args.hidden),
                          *[nn.TransformerEncoderLayer(args.hidden, 4, 4 * args.hidden,
                                                       batch_first=True) for _ in range(2)],
                          nn.Linear(args.hidden, vocab))
    ckpt = os.path.join(work, "model.pt")
    torch.save(model.state_dict(), ckpt)  # stands in for the released checkpoint
    model.load_state_dict(torch.load(ckpt, map_location="cpu"))
    model = model.to(device=device, dtype=dtype).eval()

    print("TRIALBOT_PHASE data", flush=True)
    data = os.path.join(work, "tokens.pt")
    torch.save(torch.randint(0, vocab, (args.batches * args.batch, args.seq)), data)
    tokens = torch.load(data)

    print("TRIALBOT_PHASE run", flush=True)
    with torch.inference_mode():
        for i in range(args.batches):
            t0 = time.perf_counter()
            batch = tokens[i * args.batch:(i + 1) * args.batch].to(device)
            logits = model(batch)
            if device == "cuda":
                torch.cuda.synchronize()
            print(f"batch {i}: {batch.shape[0]}x{args.seq} tokens, logits "
                  f"{tuple(logits.shape)}, {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
