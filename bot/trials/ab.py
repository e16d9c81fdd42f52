"""A/B trials (`/trial ab llm-infer dtype=fp32,bf16 [rounds=4]`): the same config but
one parameter, run in ABBA order (round 1 A B, round 2 B A, …) and compared on
time (a paired test on each round's A and B, bot/fits/compare.py), memory (same
method only) and quality. Pure."""
from __future__ import annotations

import math
from typing import TypeVar

from bot.blocks import reply, section
from bot.fits import compare as test
from bot.states import Json, Outcome
from worker.api import specs, units
from worker.i18n import _

T = TypeVar("T")  # a job or a report

USAGE = ("/trial ab llm-infer dtype=fp32,bf16 [batch=8 ...] [rounds=4]  |  "
         "/trial ab llm-train precision=fp32,bf16")
# Relative RMS difference of the probed logits, in units of their spread. bf16
# keeps about 3 significant digits and its rounding adds up over the layers.
LOGITS_TOLERANCE = 0.20
LOSS_TOLERANCE = 0.01
# Rounds of one A and one B, in ABBA order: a drift that grows steadily over the
# A/B adds to B in the A B rounds and to A in the B A rounds, so it cancels over
# an even number of rounds (and leaves 1/rounds of one step over an odd one).
# Four, because the paired test has rounds − 1 dof: with three its t quantile is
# 4.3 and a 2× difference under 15% noise per trial is found in 78% of draws,
# with four 98% (tests/unit/test_compare.py's draws); and four cancel a linear drift.
ROUNDS, MAX_ROUNDS = 4, 6


def order(n: int) -> list[str]:
    """The arms of `n` rounds in the order they are queued and run: A B B A A B…"""
    return [arm for i in range(n) for arm in (("A", "B") if i % 2 == 0 else ("B", "A"))]


def rounds(words: list[str]) -> tuple[list[str], int]:
    """`rounds=N` taken out of the words → (the other words, N)."""
    given = [w for w in words if w.startswith("rounds=")]
    rest = [w for w in words if not w.startswith("rounds=")]
    if not given:
        return rest, ROUNDS
    raw = given[-1].partition("=")[2]
    if len(given) > 1 or not raw.isdigit() or not 1 <= int(raw) <= MAX_ROUNDS:
        raise specs.SpecError(" ".join(given), _("`{words}`: rounds= is one whole number from "
                                                 "1 to {most} (rounds of one A and one B; 2 or "
                                                 "more let the paired test see the drift between "
                                                 "trials), e.g. rounds=4",
                                                 words=" ".join(given), most=MAX_ROUNDS), USAGE)
    return rest, int(raw)


def parse(words: list[str]) -> tuple[list[specs.TrialSpec], list[str], str]:
    """Exactly one parameter with two comma values → (the specs in ABBA order
    for `rounds=N` rounds (order()), their words, the parameter)."""
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
    arm = {}
    for name, value in (("A", a), ("B", b)):
        one = [f"{key}={value}" if w == lists[0] else w for w in words]
        arm[name] = (specs.parse(one), " ".join(one))  # refused exactly as a single trial
    queued = order(n)
    return [arm[x][0] for x in queued], [arm[x][1] for x in queued], key


def _peak(r: Json) -> tuple[int | None, str | None]:
    m = r["memory"]
    for field in ("peak_allocated", "process_used_peak", "host_rss_peak"):
        if m.get(field):
            return m[field], field
    return None, None


def compare(a: Json, b: Json) -> Json:
    """One trial of B against one of A: memory by the same method, and the
    quality check (time is the arms' test: bot/fits/compare.py)."""
    out: Json = {}
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

def arms(items: list[T]) -> tuple[list[T], list[T]]:
    """Jobs (or reports) in queued order (ABBA, order()) → (A's, B's)."""
    said = order(len(items) // 2)
    return ([x for x, arm in zip(items, said) if arm == "A"],
            [x for x, arm in zip(items, said) if arm == "B"])


def pairs(items: list[T]) -> list[tuple[T, T]]:
    """Jobs (or reports) in queued order → each round's (A, B)."""
    rounds = [items[i:i + 2] for i in range(0, len(items) - 1, 2)]
    return [(x, y) if i % 2 == 0 else (y, x) for i, (x, y) in enumerate(rounds)]


def ran_order(jobs: list[Json]) -> str:
    """"A T1, B T2, B T3, A T4": the arms in the order queued."""
    return ", ".join(f"{arm} {j['trial']}" for j, arm in zip(jobs, order(len(jobs) // 2)))


def time_test(jobs: list[Json], reports: list[Json | None]) -> Json:
    """The paired time test on each round's (A, B) (bot/fits/compare.py), each
    report carrying the worker that ran it (the job's, for an older report)."""
    worked = [dict(r, worker=r.get("worker") or j.get("worker")) if r else r
              for j, r in zip(jobs, reports)]
    return test.paired(pairs(worked))


def queued(jobs: list[Json]) -> Json:
    a, b = arms(jobs)
    values = dict(n=len(a), a=a[0]["words"], trials_a=", ".join(j["trial"] for j in a),
                  b=b[0]["words"], trials_b=", ".join(j["trial"] for j in b),
                  order=ran_order(jobs))
    if len(a) == 1:  # one A and one B: no order to balance a drift with
        return reply(_("Queued an A/B of 1 round: A `{a}` ({trials_a}), B `{b}` ({trials_b}), "
                       "run in the order {order}; one round cannot balance a drift (the "
                       "default, rounds={rounds}, runs A B B A A B B A). The comparison is "
                       "posted in this channel when all have ended.", rounds=ROUNDS, **values))
    return reply(_("Queued an A/B of {n} rounds: A `{a}` ({trials_a}), B `{b}` ({trials_b}), "
                   "run in the order {order} (ABBA: a drift that grows steadily falls on both "
                   "alike). The comparison is posted in this channel when all have ended.",
                   **values))


def _when(jobs: list[Json]) -> str:
    """What ran when: "A T1 on cpu-a at +0 s, B T2 on cpu-a at +41 s, …", by start."""
    said = dict(zip((j["trial"] for j in jobs), order(len(jobs) // 2)))
    started = sorted((j for j in jobs if j.get("started")), key=lambda j: j["started"])
    if not started:
        return ran_order(jobs)
    first = started[0]["started"]
    return ", ".join(_("{arm} {trial} on {worker} at +{at} s", arm=said[j["trial"]],
                       trial=j["trial"], worker=j.get("worker") or "?",
                       at=format(j["started"] - first, ".0f")) for j in started)


def message(jobs: list[Json], reports: list[Json | None]) -> Json:
    (ja, jb), (ra, rb) = arms(jobs), arms(reports)
    head = _("*A/B*: A {trials_a} `{a}` vs B {trials_b} `{b}`",
             trials_a=", ".join(j["trial"] for j in ja), a=ja[0]["words"],
             trials_b=", ".join(j["trial"] for j in jb), b=jb[0]["words"])
    ok_a = [r for r in ra if r and r["status"] == Outcome.OK]
    ok_b = [r for r in rb if r and r["status"] == Outcome.OK]
    bad = [j["trial"] for j, r in zip(jobs, reports) if not r or r["status"] != Outcome.OK]
    if not ok_a or not ok_b:
        text = head + "\n" + _(":x: {trials} did not succeed, so there is nothing to compare.",
                                trials=", ".join(bad))
    else:
        c = compare(ok_a[0], ok_b[0])
        t = time_test(jobs, reports)
        mean_a = t["a"]["mean"] or ok_a[0]["latency"]["mean"]
        mean_b = t["b"]["mean"] or ok_b[0]["latency"]["mean"]
        times = {"a": units.duration(mean_a), "b": units.duration(mean_b),
                 "verdict": test.phrase(t)}
        lines = [_("• time per step: A {a}, B {b}: {verdict}", **times)
                 if ok_a[0].get("training") else
                 _("• time per request: A {a}, B {b}: {verdict}", **times)]
        lines.append(_("• order run (ABBA): {when}", when=_when(jobs)))
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


def _finite_probe(probe: Json) -> bool:
    """A quality probe whose logits can be compared (null: an fp16 overflow)."""
    return probe.get("logits_sd") is not None and bool(probe.get("logits_head")) and all(
        x is not None for x in probe["logits_head"])
