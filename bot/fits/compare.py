"""B against A on time, with a stated test: the verdict an A/B and a ladder step
post. Pure (numpy; the t quantile from bot/fits/ols.py).

An A/B's verdict is `paired`: its rounds run A and B next to each other on one
worker (bot/trials/ab.py's ABBA order), so each round's log(B) − log(A) is one
sample, and the t test (dof = pairs − 1) is on those differences: drift between
rounds falls on both halves of a pair and out of the test, drift within a pair
alternates sign with the order and lands in the differences' spread. A pair
whose trials ran on different workers (possibly at once) is no pair and is left
out, named; with fewer than 2 pairs left, the unpaired test below is used and
the line says so.

The unpaired test (a ladder's steps, an A/B short of pairs): each arm is a list
of reports of one config. The test is a t test on the log of the time per run,
so the interval is on the ratio B/A (95% by default):

- *between trials*, when both arms have 2 or more usable trials: one sample per
  trial (its mean), Student's t with the two arms' log-variance pooled. Drift
  between trials (another job starting, the machine's clock) is the largest
  noise on a shared machine, and only this sees it.
- *within one trial*, when an arm has one usable trial: the trial's windows
  (report["windows"]) as samples, or its latency mean, sd and count (Welch's t,
  the spreads being of different kinds). This misses drift between trials, and
  the text says so.

A trial is usable when it succeeded and has a measured time outside
contention: windows marked contended are dropped; a trial whose every window is
contended, or that has no windows and a flagged contention, is left out. An
UNSTABLE trial is kept and marked: its spread is noise the test measures (a
wider interval, so fewer verdicts), and leaving it out would make a shared
machine's A/Bs say nothing at all. An arm with no usable trial gets no
verdict, and `why` says what to run.
"""
from __future__ import annotations

import math

import numpy as np

from bot.fits.ols import t_quantile
from bot.states import Json, Outcome
from worker.i18n import N_, _

LEVEL = 0.95
NO_DIFFERENCE = N_("no measurable difference")  # shown as _(NO_DIFFERENCE)


def _busy(contention: Json) -> str:
    """The busy warning's first clause, "busy machine: others used 61% of the CPU in
    the run phase", from the note's values (the channel's language) where the
    report has them, else cut from the English summary (older reports)."""
    values = (contention.get("summary_note") or {}).get("values") or {}
    if "others" in values and "phase" in values:
        return _("busy machine: other processes used {others} of the CPU during the {phase} "
                 "phase", others=values["others"], phase=values["phase"])
    return (contention.get("summary") or _("busy machine")).split(" (")[0].split(": these")[0]


def _unstable(r: Json) -> str | None:
    st = r.get("stability") or {}
    if st.get("stable") is False:
        ratio = st.get("iqr_over_median")
        return (_("UNSTABLE (IQR/median {ratio})", ratio=format(ratio, ".0%")) if ratio is not None
                else "UNSTABLE")
    return None


def trial_time(r: Json) -> Json:
    """One trial's time per run outside contention: {mean, samples (window
    means, or None), sd, count, excluded (why it cannot be used, or None),
    notes (marks to carry)}."""
    name = r.get("trial") or _("a trial")
    # `why` is what excluded it (failed, contended, busy): what to advise, in any language
    out: Json = {"trial": name, "mean": None, "samples": None, "sd": None, "count": 0,
           "excluded": None, "why": None, "notes": []}
    if not r or r.get("status") != Outcome.OK or not (r.get("latency") or {}).get("mean"):
        out["excluded"], out["why"] = _("{name} did not succeed", name=name), "failed"
        return out
    unstable = _unstable(r)
    if unstable:  # kept: the test's spread holds it; the mark is carried
        out["notes"].append(_("{name} was {unstable}", name=name, unstable=unstable))
    contention = r.get("contention")
    rows = ((r.get("windows") or {}).get("rows") or [])
    if rows:
        quiet = [w for w in rows if not w.get("contended") and w.get("count") and w.get("mean")]
        if not quiet:
            out["excluded"] = _("{name}: every window of its run phase was contended",
                                name=name)
            out["why"] = "contended"
            return out
        if len(quiet) < len(rows):
            out["notes"].append(_("{name}: {left} of {total} windows contended, left out",
                                  name=name, left=len(rows) - len(quiet), total=len(rows)))
        counts = np.array([w["count"] for w in quiet], dtype=float)
        means = np.array([w["mean"] for w in quiet], dtype=float)
        out.update(mean=float(counts @ means / counts.sum()), samples=means.tolist(),
                   count=int(counts.sum()))
        if len(quiet) == 1:  # one window left: its runs' own spread
            out.update(sd=quiet[0].get("sd"), count=int(quiet[0]["count"]))
        return out
    if contention and contention.get("flagged"):
        out["excluded"], out["why"] = f"{name}: {_busy(contention)}", "busy"
        return out
    if contention is None:
        out["notes"].append(_("{name}: contention not measured", name=name))
    lat = r["latency"]
    out.update(mean=float(lat["mean"]), sd=lat.get("stdev"), count=int(lat.get("count") or 0))
    return out


def _arm(reports: list[Json | None]) -> Json:
    """An arm's log-mean estimate: {m, v (its variance), dof, n, method, ...}."""
    times = [trial_time(r or {}) for r in reports]
    usable = [t for t in times if not t["excluded"]]
    arm = {"trials": times, "n": len(usable), "notes": [n for t in times for n in t["notes"]],
           "excluded": [t["excluded"] for t in times if t["excluded"]],
           "why": [t["why"] for t in times if t["excluded"]],
           "mean": float(np.mean([t["mean"] for t in usable])) if usable else None}
    if len(usable) >= 2:
        logs = np.log([t["mean"] for t in usable])
        arm.update(m=float(logs.mean()), v=float(logs.var(ddof=1)) / len(logs),
                   dof=len(logs) - 1, method="between")
    elif usable:
        t = usable[0]
        if t["samples"] and len(t["samples"]) >= 2:
            logs = np.log(t["samples"])
            arm.update(m=math.log(t["mean"]), v=float(logs.var(ddof=1)) / len(logs),
                       dof=len(logs) - 1, method="windows")
        elif t["sd"] is not None and t["count"] >= 2:
            # delta method: the sd of log(mean) is about sd / mean / sqrt(count)
            arm.update(m=math.log(t["mean"]), v=(t["sd"] / t["mean"]) ** 2 / t["count"],
                       dof=t["count"] - 1, method="runs")
        else:
            arm.update(method=None)
    else:
        arm.update(method=None)
    return arm


def compare(a: list[Json | None], b: list[Json | None], level: float = LEVEL,
            names: tuple[str, str] = ("A", "B")) -> Json:
    """B's time per run against A's: {ratio, low, high, level, dof, verdict
    ("faster", "slower", "same", or None), why (when None), a, b (the arms),
    marks (UNSTABLE, contended, not measured: to carry into the message)}.
    `names` are what the words call A and B."""
    A, B = _arm(a), _arm(b)
    out: Json = {"level": level, "names": names, "a": A, "b": B, "ratio": None, "low": None,
           "high": None, "test": None,
           "dof": None, "verdict": None, "why": None,
           "marks": [*A["excluded"], *B["excluded"], *A["notes"], *B["notes"]]}
    if A["mean"] and B["mean"]:
        out["ratio"] = B["mean"] / A["mean"]
    for name, arm in zip(names, (A, B)):
        if not arm["n"]:
            out["why"] = _("{name} has no usable trial ({excluded}): {advice}", name=name,
                           excluded="; ".join(arm["excluded"]), advice=_advice(arm["why"]))
            return out
        if arm["method"] is None:
            out["why"] = _("{name}'s one usable trial measured no spread (fewer than 2 runs "
                           "outside contention); run more repeats=, or more rounds=", name=name)
            return out
    out["ratio"] = math.exp(B["m"] - A["m"])
    if A["method"] == B["method"] == "between":
        # Both spreads are the machine's drift between trials, multiplicative, so
        # one log-variance is pooled (Student's t). Welch's dof would fall towards
        # 1 with 2 trials an arm (t = 12.7) and find almost nothing.
        na, nb = A["n"], B["n"]
        pooled = (A["v"] * na * (na - 1) + B["v"] * nb * (nb - 1)) / (na + nb - 2)
        v, dof, test = pooled * (1 / na + 1 / nb), na + nb - 2, "Student"
    else:  # spreads of different kinds (a trial's runs, trials): Welch–Satterthwaite
        v, test = A["v"] + B["v"], "Welch"
        # two zero variances (identical runs) leave the sum of the dofs
        dof = v * v / (A["v"] ** 2 / A["dof"] + B["v"] ** 2 / B["dof"]) if v > 0 else (
            A["dof"] + B["dof"])
    half = t_quantile(dof, level) * math.sqrt(v)
    out.update(dof=dof, test=test, low=math.exp(B["m"] - A["m"] - half),
               high=math.exp(B["m"] - A["m"] + half))
    out["verdict"] = ("faster" if out["high"] < 1 else "slower" if out["low"] > 1 else "same")
    return out


def _pair(ra: Json | None, rb: Json | None) -> Json:
    """One round's A and B: {a, b (trial_time), diff (log B − log A, or None), why}."""
    ta, tb = trial_time(ra or {}), trial_time(rb or {})
    out: Json = {"a": ta, "b": tb, "diff": None, "why": None}
    wa, wb = (ra or {}).get("worker"), (rb or {}).get("worker")
    if ta["excluded"] or tb["excluded"]:
        out["why"] = "; ".join(t["excluded"] for t in (ta, tb) if t["excluded"])
    elif wa != wb:
        out["why"] = _("{a} and {b} ran on different workers ({wa}, {wb}), so not side by side: "
                       "no pair", a=ta["trial"], b=tb["trial"], wa=wa or "?", wb=wb or "?")
    else:
        out["diff"] = math.log(tb["mean"]) - math.log(ta["mean"])
    return out


def paired(pairs: list[tuple[Json | None, Json | None]], level: float = LEVEL,
           names: tuple[str, str] = ("A", "B")) -> Json:
    """B's time per run against A's from each round's (A, B) reports: compare()'s
    dict with test "paired", dof = usable pairs − 1, and `pairs` (each round's
    diff, or why it is left out). Under 2 usable pairs: the unpaired compare()
    of the usable trials, its marks saying why."""
    rounds = [_pair(ra, rb) for ra, rb in pairs]
    used = [p for p in rounds if p["diff"] is not None]
    notes = [n for p in rounds for t in (p["a"], p["b"]) for n in t["notes"]]
    left_out = [p["why"] for p in rounds if p["diff"] is None]
    if len(used) < 2:
        out = compare([ra for ra, _rb in pairs], [rb for _ra, rb in pairs], level, names)
        if len(pairs) > 1:  # rounds=1 asked for no pairs: nothing to explain
            out["marks"].append(_("{n} usable pair(s) of {total}: the unpaired test, which "
                                  "drift between trials can sway", n=len(used),
                                  total=len(pairs)))
        return out
    d = np.array([p["diff"] for p in used])
    dof = len(d) - 1
    half = t_quantile(dof, level) * float(d.std(ddof=1)) / math.sqrt(len(d))
    mean = float(d.mean())
    arm = {n: {"n": len(used), "method": "paired",
               "mean": float(np.mean([p[n]["mean"] for p in used]))} for n in ("a", "b")}
    out = {"level": level, "names": names, "a": arm["a"], "b": arm["b"], "test": "paired",
           "ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half),
           "dof": dof, "why": None, "pairs": rounds, "marks": [*left_out, *notes]}
    out["verdict"] = ("faster" if out["high"] < 1 else "slower" if out["low"] > 1 else "same")
    return out


def _advice(why: list[str]) -> str:
    """What to run, from what excluded the arm's trials (trial_time's `why`)."""
    if "contended" in why or "busy" in why:
        return _("run it again when the machine is quiet, or on a worker nothing else uses")
    return _("fix the failed trial and run it again")


def over(c: Json) -> str:
    """What the interval's spread came from: "over 2+2 trials"."""
    a, b = c["a"], c["b"]
    if c["test"] == "paired":
        return _("over {n} pairs, dof {dof}", n=a["n"], dof=c["dof"])
    if a["method"] == b["method"] == "between":
        return _("over {a}+{b} trials", a=a["n"], b=b["n"])
    if a["method"] == b["method"]:
        within = {"windows": _("from the windows within each trial; the spread within a trial "
                               "misses the drift between trials"),
                  "runs": _("from the runs within each trial; the spread within a trial misses "
                            "the drift between trials")}
        return within[a["method"]]

    def said(arm: Json) -> str:
        return {"between": lambda: _("{n} trials", n=arm["n"]),
                "windows": lambda: _("windows in 1 trial"),
                "runs": lambda: _("runs in 1 trial")}[arm["method"]]()
    na, nb = c["names"]
    return _("from {na}: {a}, {nb}: {b}; the spread within a trial misses the drift between "
             "trials", na=na, a=said(a), nb=nb, b=said(b))


def phrase(c: Json) -> str:
    """"B/A ×1.02 (95% Welch interval ×0.97–×1.07 over 2+2 trials): no measurable
    difference", or why no verdict is given."""
    na, nb = c["names"]
    if c["verdict"] is None:
        if c["ratio"]:
            return _("{nb}/{na} ×{ratio}, no verdict: {why}", nb=nb, na=na,
                     ratio=format(c["ratio"], ".2f"), why=c["why"])
        return _("no verdict: {why}", why=c["why"])
    said = {"faster": lambda: _("{nb} is faster", nb=nb),
            "slower": lambda: _("{nb} is slower", nb=nb),
            "same": lambda: _(NO_DIFFERENCE)}[c["verdict"]]()
    return _("{nb}/{na} ×{ratio} ({level} {test} t interval ×{low}–×{high} {over}): {said}",
             nb=nb, na=na, ratio=format(c["ratio"], ".2f"), level=format(c["level"], ".0%"),
             test=c["test"], low=format(c["low"], ".2f"), high=format(c["high"], ".2f"),
             over=over(c), said=said)
