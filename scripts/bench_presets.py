#!/usr/bin/env python3
"""Is every preset's full-depth parameter count within 1% of the published
figure? (issue 9 target.)

For each preset in worker/presets.py: the count by worker/arithmetic.py (the
arithmetic a report's `full_depth` and the bot's scaling fit use), the count
of the real Decoder (worker/workloads/decoder.py) built at full depth on
torch's `meta` device (shapes only, no memory), the published figure and the
relative error. Exits 1 when the two counts differ or an error is over 1%.

    python scripts/bench_presets.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from worker import arithmetic, presets  # noqa: E402
from worker.workloads.decoder import Decoder  # noqa: E402


def module_params(name: str) -> int:
    s = presets.full_shape(name)
    with torch.device("meta"):
        model = Decoder(s["vocab"], s["hidden"], s["layers"], s["heads"], s["kv_heads"],
                        s["ffn"])
    return sum(t.numel() for t in model.parameters())


def main() -> int:
    bad = []
    print(f"{'preset':<12} {'shape (hidden/layers/heads/kv/ffn/vocab)':<42} {'arithmetic':>15} "
          f"{'meta module':>15} {'published':>9} {'error':>8}")
    for name, p in presets.PRESETS.items():
        ours = arithmetic.weight_params(presets.full_shape(name))["total"]
        module = module_params(name)
        err = (ours - p.published_params) / p.published_params
        shape = f"{p.hidden}/{p.layers}/{p.heads}/{p.kv_heads}/{p.ffn}/{p.vocab}"
        flag = "" if module == ours and abs(err) <= presets.TOLERANCE else "  FAIL"
        print(f"{name:<12} {shape:<42} {ours:>15,} {module:>15,} {p.published_text:>9} "
              f"{err:>+8.3%}{flag}")
        if flag:
            bad.append(name)
    if bad:
        print(f"FAIL: {', '.join(bad)}: the counts differ or are over "
              f"{presets.TOLERANCE:.0%} from the published figure")
        return 1
    print(f"ok: arithmetic = meta-device module count for every preset, each within "
          f"{presets.TOLERANCE:.0%} of the published figure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
