"""A/B trials (`/trial ab llm-infer dtype=fp32,bf16 [rounds=3]`): the same config but
one parameter, run interleaved A, B, A, B… and compared on time (a stated test,
bot/fits/compare.py), memory (same method only) and quality. Pure."""
from __future__ import annotations

import math

from bot.blocks import reply, section
from bot.fits import compare as test
from worker import spec as specs
from worker import units
from worker.i18n import _, ngettext

USAGE = ("/trial ab llm-infer dtype=fp32,bf16 [batch=8 ...] [rounds=3]  |  "
         "/trial ab llm-train precision=fp32,bf16")
# Relative RMS difference of the probed logits, in units of their spread. bf16
# keeps about 3 significant digits and its rounding adds up over the layers.
LOGITS_TOLERANCE = 0.20
LOSS_TOLERANCE = 0.01
# Rounds of A then B. Two or more give the test a spread between trials for each
# arm (the drift a shared machine adds). Three, because with two the t quantile
# is 4.3: at 15% drift between trials a 2× difference is found 63% of the time
# with two rounds, 98% with three (tests/test_compare.py's draws).
ROUNDS, MAX_ROUNDS = 3, 6


def rounds(words: list[str]) -> tuple[list[str], int]:
    """`rounds=N` taken out of the words → (the other words, N)."""
    given = [w for w in words if w.startswith("rounds=")]
    rest = [w for w in words if not w.startswith("rounds=")]
    if not given:
        return rest, ROUNDS
    raw = given[-1].partition("=")[2]
    if len(given) > 1 or not raw.isdigit() or not 1 <= int(raw) <= MAX_ROUNDS:
        raise specs.SpecError(" ".join(given), _("`{words}`: rounds= is one whole number from "
                                                 "1 to {most} (rounds of A then B; 2 or more let "
                                                 "the test see the drift between trials)",
                                                 words=" ".join(given), most=MAX_ROUNDS), USAGE)
    return rest, int(raw)


def parse(words: list[str]) -> tuple[list[specs.TrialSpec], list[str], str]:
    """Exactly one parameter with two comma values → (the specs A, B, A, B… for
    `rounds=N` rounds, their words, the parameter)."""
    words, n = rounds(words)
    lists = [w for w in words[1:] if "," in w.partition("=")[2]]
    if len(lists) != 1 or len(lists[0].partition("=")[2].split(",")) != 2:
        raise specs.SpecError(" ".join(lists) or " ".join(words[:1]),
                              _("an A/B varies exactly one parameter with two values, e.g. "
                                "dtype=fp32,bf16"), USAGE)
    key, _eq, raw = lists[0].partition("=")
    a, b = raw.split(",")
    if a == b:
        raise specs.SpecError(lists[0], _("`{word}`: A and B are the same value",
                                          word=lists[0]), USAGE)
    out, lines = [], []
    for value in (a, b):
        one = [f"{key}={value}" if w == lists[0] else w for w in words]
        out.append(specs.parse(one))  # refused exactly as a single trial
        lines.append(" ".join(one))
    return out * n, lines * n, key


def _peak(r: dict) -> tuple[int | None, str | None]:
    m = r["memory"]
    for field in ("peak_allocated", "process_used_peak", "host_rss_peak"):
        if m.get(field):
            return m[field], field
    return None, None


def compare(a: dict, b: dict) -> dict:
    """One trial of B against one of A: memory by the same method, and the
    quality check (time is the arms' test: bot/fits/compare.py)."""
    out = {}
    (ma, fa), (mb, fb) = _peak(a), _peak(b)
    out["memory"] = (mb - ma) / ma if ma and mb and fa == fb else None
    out["memory_method"] = fa if fa == fb else None
    if a.get("training") and b.get("training"):
        la, lb = a["training"]["loss_final"], b["training"]["loss_final"]
        value = (lb - la) / la if la and lb is not None else None  # null: a loss diverged
        out["quality"] = {"what": _("loss after {steps} steps from the same seed",
                                    steps=a["training"]["steps"]),
                          "value": value, "tolerance": LOSS_TOLERANCE,
                          "held": value is not None and abs(value) <= LOSS_TOLERANCE}
    elif a.get("quality_probe") and b.get("quality_probe"):
        qa, qb = a["quality_probe"], b["quality_probe"]
        rel = None  # no spread, or logits that overflowed (null): nothing to hold
        if _finite_probe(qa) and _finite_probe(qb) and qa["logits_sd"]:
            rms = math.sqrt(sum((x - y) ** 2 for x, y in zip(qa["logits_head"],
                                                              qb["logits_head"]))
                            / len(qa["logits_head"]))
            rel = rms / qa["logits_sd"]
        agree = sum(x == y for x, y in zip(qa["first_tokens"], qb["first_tokens"]))
        out["quality"] = {"what": _("prefill logits: RMS difference / spread of A's logits; "
                                    "next token agrees for {agree} of {n} sequences (random "
                                    "weights leave near-ties, so this is shown, not judged)",
                                    agree=agree, n=len(qa["first_tokens"])),
                          "value": rel, "tolerance": LOGITS_TOLERANCE,
                          "held": rel is not None and rel <= LOGITS_TOLERANCE}
    else:
        out["quality"] = None
    return out


# the posted comparison --------------------------------------------------------

def arms(items: list) -> tuple[list, list]:
    """Jobs (or reports) queued A, B, A, B… → (A's, B's)."""
    return items[0::2], items[1::2]


def queued(jobs: list[dict]) -> dict:
    a, b = arms(jobs)
    n = len(a)
    order = ", ".join(j["trial"] for j in jobs)
    return reply(ngettext("Queued an A/B of {n} round: A `{a}` ({trials_a}), B `{b}` "
                          "({trials_b}), run in the order {order} so drift over time falls on "
                          "both. The comparison is posted in this channel when all have ended.",
                          "Queued an A/B of {n} rounds: A `{a}` ({trials_a}), B `{b}` "
                          "({trials_b}), run in the order {order} so drift over time falls on "
                          "both. The comparison is posted in this channel when all have ended.",
                          n, a=a[0]["words"], trials_a=", ".join(j["trial"] for j in a),
                          b=b[0]["words"], trials_b=", ".join(j["trial"] for j in b),
                          order=order))


def message(jobs: list[dict], reports: list[dict | None]) -> dict:
    (ja, jb), (ra, rb) = arms(jobs), arms(reports)
    head = _("*A/B*: A {trials_a} `{a}` vs B {trials_b} `{b}`",
             trials_a=", ".join(j["trial"] for j in ja), a=ja[0]["words"],
             trials_b=", ".join(j["trial"] for j in jb), b=jb[0]["words"])
    ok_a = [r for r in ra if r and r["status"] == "ok"]
    ok_b = [r for r in rb if r and r["status"] == "ok"]
    bad = [j["trial"] for j, r in zip(jobs, reports) if not r or r["status"] != "ok"]
    if not ok_a or not ok_b:
        text = head + "\n" + _(":x: {trials} did not succeed, so there is nothing to compare.",
                                trials=", ".join(bad))
    else:
        c = compare(ok_a[0], ok_b[0])
        t = test.compare(ok_a, ok_b)
        mean_a = t["a"]["mean"] or ok_a[0]["latency"]["mean"]
        mean_b = t["b"]["mean"] or ok_b[0]["latency"]["mean"]
        times = {"a": units.duration(mean_a), "b": units.duration(mean_b),
                 "verdict": test.phrase(t)}
        lines = [_("• time per step: A {a}, B {b}: {verdict}", **times)
                 if ok_a[0].get("training") else
                 _("• time per request: A {a}, B {b}: {verdict}", **times)]
        if bad:
            lines.append(_("• {trials} did not succeed: compared without them",
                           trials=", ".join(bad)))
        if t["marks"]:
            lines.append(":warning: " + "; ".join(t["marks"]))
        lines.append(_("• peak memory ({method}): {change}", method=c["memory_method"],
                       change=format(c["memory"], "+.1%"))
                     if c["memory"] is not None else
                     _("• peak memory: not compared (A and B were not measured the same way)"))
        q = c["quality"]
        if q:
            values = {"value": _("not finite") if q["value"] is None else f"{q['value']:+.2%}",
                      "tolerance": f"{q['tolerance']:.0%}",
                      "what": q["what"]}
            lines.append(_("• quality held: {value} against a tolerance of ±{tolerance} — "
                           "{what}", **values) if q["held"] else
                         _("• quality BROKE: {value} against a tolerance of ±{tolerance} — "
                           "{what}", **values))
        else:
            lines.append(_("• quality: this workload reports nothing to compare"))
        text = head + "\n" + "\n".join(lines)
    return {"channel": jobs[0]["channel"], "kind": "ab", "text": text,
            "blocks": [section(text)]}


def _finite_probe(probe: dict | None) -> bool:
    """A quality probe whose logits can be compared (null: an fp16 overflow)."""
    return probe.get("logits_sd") is not None and bool(probe.get("logits_head")) and all(
        x is not None for x in probe["logits_head"])
