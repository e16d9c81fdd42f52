"""A/B trials (`/trial ab llm-infer dtype=fp32,bf16`): the same config but one
parameter, compared on time, memory (same method only) and quality. Pure."""
from __future__ import annotations

import math

from bot.blocks import reply, section
from worker import spec as specs
from worker import units

USAGE = ("/trial ab llm-infer dtype=fp32,bf16 [batch=8 ...]  |  "
         "/trial ab llm-train precision=fp32,bf16")
# Relative RMS difference of the probed logits, in units of their spread. bf16
# keeps about 3 significant digits and its rounding adds up over the layers.
LOGITS_TOLERANCE = 0.20
LOSS_TOLERANCE = 0.01


def parse(words: list[str]) -> tuple[list[specs.TrialSpec], list[str], str]:
    """Exactly one parameter with two comma values → (specs A and B, their words,
    the parameter)."""
    lists = [w for w in words[1:] if "," in w.partition("=")[2]]
    if len(lists) != 1 or len(lists[0].partition("=")[2].split(",")) != 2:
        raise specs.SpecError(" ".join(lists) or " ".join(words[:1]),
                              "an A/B varies exactly one parameter with two values, e.g. "
                              "dtype=fp32,bf16", USAGE)
    key, _, raw = lists[0].partition("=")
    a, b = raw.split(",")
    if a == b:
        raise specs.SpecError(lists[0], f"`{lists[0]}`: A and B are the same value", USAGE)
    out, lines = [], []
    for value in (a, b):
        one = [f"{key}={value}" if w == lists[0] else w for w in words]
        out.append(specs.parse(one))  # refused exactly as a single trial
        lines.append(" ".join(one))
    return out, lines, key


def _peak(r: dict) -> tuple[int | None, str | None]:
    m = r["memory"]
    for field in ("peak_allocated", "process_used_peak", "host_rss_peak"):
        if m.get(field):
            return m[field], field
    return None, None


def compare(a: dict, b: dict) -> dict:
    """B against A: time, memory by the same method, and the quality check."""
    out = {"time": b["latency"]["mean"] / a["latency"]["mean"] - 1}
    (ma, fa), (mb, fb) = _peak(a), _peak(b)
    out["memory"] = (mb - ma) / ma if ma and mb and fa == fb else None
    out["memory_method"] = fa if fa == fb else None
    if a.get("training") and b.get("training"):
        la, lb = a["training"]["loss_final"], b["training"]["loss_final"]
        out["quality"] = {"what": f"loss after {a['training']['steps']} steps from the same seed",
                          "value": (lb - la) / la, "tolerance": LOSS_TOLERANCE,
                          "held": abs(lb - la) / la <= LOSS_TOLERANCE}
    elif a.get("quality_probe") and b.get("quality_probe"):
        qa, qb = a["quality_probe"], b["quality_probe"]
        rms = math.sqrt(sum((x - y) ** 2 for x, y in zip(qa["logits_head"], qb["logits_head"]))
                        / len(qa["logits_head"]))
        rel = rms / qa["logits_sd"] if qa["logits_sd"] else float("inf")
        agree = sum(x == y for x, y in zip(qa["first_tokens"], qb["first_tokens"]))
        out["quality"] = {"what": f"prefill logits: RMS difference / spread of A's logits; "
                                  f"next token agrees for {agree} of {len(qa['first_tokens'])} "
                                  "sequences (random weights leave near-ties, so this is shown, "
                                  "not judged)",
                          "value": rel, "tolerance": LOGITS_TOLERANCE,
                          "held": rel <= LOGITS_TOLERANCE}
    else:
        out["quality"] = None
    return out


# the posted comparison --------------------------------------------------------

def queued(jobs: list[dict]) -> dict:
    return reply(f"Queued an A/B: A {jobs[0]['trial']} `{jobs[0]['words']}`, "
                 f"B {jobs[1]['trial']} `{jobs[1]['words']}`. The comparison is posted in this "
                 "channel when both have ended.")


def message(jobs: list[dict], reports: list[dict | None]) -> dict:
    a, b = reports
    head = (f"*A/B*: A {jobs[0]['trial']} `{jobs[0]['words']}` vs "
            f"B {jobs[1]['trial']} `{jobs[1]['words']}`")
    bad = [j["trial"] for j, r in zip(jobs, reports) if not r or r["status"] != "ok"]
    if bad:
        text = f"{head}\n:x: {', '.join(bad)} did not succeed, so there is nothing to compare."
    else:
        c = compare(a, b)
        unit = "step" if a.get("training") else "request"
        lines = [f"• time per {unit}: A {units.duration(a['latency']['mean'])}, B "
                 f"{units.duration(b['latency']['mean'])} ({c['time']:+.1%}; B is "
                 f"{1 / (1 + c['time']):.2f}× A's speed)"]
        lines.append(f"• peak memory ({c['memory_method']}): {c['memory']:+.1%}"
                     if c["memory"] is not None else
                     "• peak memory: not compared (A and B were not measured the same way)")
        q = c["quality"]
        if q:
            verdict = "held" if q["held"] else "BROKE"
            lines.append(f"• quality {verdict}: {q['value']:+.2%} against a tolerance of "
                         f"±{q['tolerance']:.0%} — {q['what']}")
        else:
            lines.append("• quality: this workload reports nothing to compare")
        text = head + "\n" + "\n".join(lines)
    return {"channel": jobs[0]["channel"], "kind": "ab", "text": text,
            "blocks": [section(text)]}
