"""A sweep fit's `arithmetic`: the weight and KV-cache bytes its defaults
imply (llm-infer from its shape, hf-infer from transformers' count in the
reports), shown beside the fitted memory. Pure."""
from __future__ import annotations

from bot.states import Json
from worker.api import arithmetic
from worker.i18n import _

DTYPE_BYTES = arithmetic.DTYPE_BYTES


def add_arithmetic(out: Json, first: Json) -> None:
    """Set `out`'s `arithmetic` (and an hf-infer sweep's `sizing`) from its
    defaults and its first ok report, where they say enough."""
    sizing = (first.get("full_depth") or {}).get("sizing")
    if out["workload"] == "hf-infer" and sizing and "dtype" in out["defaults"]:
        out["sizing"] = sizing
        out["arithmetic"] = sized_arithmetic(out["defaults"], sizing)
    if out["workload"] == "llm-infer":
        d = out["defaults"]
        if all(k in d for k in ("hidden", "layers", "heads", "kv_heads", "vocab", "dtype")):
            out["arithmetic"] = llm_arithmetic(d)


def llm_arithmetic(d: Json) -> Json:
    """An llm-infer sweep's `arithmetic`, from the built-in decoder's shape."""
    wp = arithmetic.weight_params(d)
    return {
        "weight_params": wp["total"], "weight_bytes": arithmetic.weight_bytes(d),
        "dtype": d["dtype"], "dtype_bytes": DTYPE_BYTES[d["dtype"]],
        "parts": {k: wp[k] for k in ("embedding", "layers", "final_norm", "lm_head")},
        "tied_embedding": False,
        "kv_bytes_per_token": arithmetic.kv_bytes_per_token(d),
        "kv_formula": "2·layers·kv_heads·head_dim·(prompt+gen)·batch·bytes = "
                      f"2·{d['layers']}·{d['kv_heads']}·{d['hidden'] // d['heads']}"
                      f"·s·b·{DTYPE_BYTES[d['dtype']]}",
    }


def sized_arithmetic(d: Json, s: Json) -> Json:
    """An hf-infer sweep's `arithmetic`, from transformers' count in its reports."""
    depth, n = d.get("layers") or s["layers"], DTYPE_BYTES[d["dtype"]]
    w = arithmetic.sized_params(s, depth)
    return {"weight_params": w["total"], "weight_bytes": w["total"] * n, "dtype": d["dtype"],
            "dtype_bytes": n, "layers": depth,
            "parts": {"embedding": w["embedding"], "layers": w["layers"],
                      "final_norm": w["other"], "lm_head": w["lm_head"]},
            "tied_embedding": s.get("tied_embeddings", False),
            "kv_bytes_per_token": arithmetic.sized_kv_per_token(s, n, depth),
            "kv_formula": _sized_formula(s, n)}


def _sized_formula(s: Json, n: int) -> str:
    """The cache's formula as the reports' sizing states it (worker/kvcache.py)."""
    if s.get("kv_how"):
        return _("transformers' cache at the full {layers} layers: {how}; × {bytes} B an "
                 "element", layers=s["layers"], how=s["kv_how"], bytes=n)
    windows = sorted({k["window"] for k in s["kv"] if k.get("window")})  # an older report
    return (_("Σ over the layers of K+V elements per token·bytes (transformers' "
              "sizing; sliding-window layers keep at most {windows} positions)",
              windows=", ".join(map(str, windows))) if windows else
            _("Σ over the layers of K+V elements per token·bytes (transformers' sizing)"))
