"""B against A on time, with a stated test: the verdict an A/B and a ladder step
post. Pure (numpy; the t quantile from bot/fits/ols.py).

Each arm is a list of reports of one config. The test is a t test on the log
of the time per run, so the interval is on the ratio B/A (95% by default):

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

LEVEL = 0.95
NO_DIFFERENCE = "no measurable difference"


def _unstable(r: dict) -> str | None:
    st = r.get("stability") or {}
    if st.get("stable") is False:
        ratio = st.get("iqr_over_median")
        return f"UNSTABLE (IQR/median {ratio:.0%})" if ratio is not None else "UNSTABLE"
    return None


def trial_time(r: dict) -> dict:
    """One trial's time per run outside contention: {mean, samples (window
    means, or None), sd, count, excluded (why it cannot be used, or None),
    notes (marks to carry)}."""
    name = r.get("trial") or "a trial"
    out = {"trial": name, "mean": None, "samples": None, "sd": None, "count": 0,
           "excluded": None, "notes": []}
    if not r or r.get("status") != "ok" or not (r.get("latency") or {}).get("mean"):
        out["excluded"] = f"{name} did not succeed"
        return out
    unstable = _unstable(r)
    if unstable:  # kept: the test's spread holds it; the mark is carried
        out["notes"].append(f"{name} was {unstable}")
    contention = r.get("contention")
    rows = ((r.get("windows") or {}).get("rows") or [])
    if rows:
        quiet = [w for w in rows if not w.get("contended") and w.get("count") and w.get("mean")]
        if not quiet:
            out["excluded"] = f"{name}: every window of its run phase was contended"
            return out
        if len(quiet) < len(rows):
            out["notes"].append(f"{name}: {len(rows) - len(quiet)} of {len(rows)} windows "
                                "contended, left out")
        counts = np.array([w["count"] for w in quiet], dtype=float)
        means = np.array([w["mean"] for w in quiet], dtype=float)
        out.update(mean=float(counts @ means / counts.sum()), samples=means.tolist(),
                   count=int(counts.sum()))
        if len(quiet) == 1:  # one window left: its runs' own spread
            out.update(sd=quiet[0].get("sd"), count=int(quiet[0]["count"]))
        return out
    if contention and contention.get("flagged"):
        # the summary's first clause: "busy machine: others used 61% of the CPU ..."
        said = (contention.get("summary") or "busy machine").split(" (")[0].split(": these")[0]
        out["excluded"] = f"{name}: {said}"
        return out
    if contention is None:
        out["notes"].append(f"{name}: contention not measured")
    lat = r["latency"]
    out.update(mean=float(lat["mean"]), sd=lat.get("stdev"), count=int(lat.get("count") or 0))
    return out


def _arm(reports: list[dict | None]) -> dict:
    """An arm's log-mean estimate: {m, v (its variance), dof, n, method, ...}."""
    times = [trial_time(r or {}) for r in reports]
    usable = [t for t in times if not t["excluded"]]
    arm = {"trials": times, "n": len(usable), "notes": [n for t in times for n in t["notes"]],
           "excluded": [t["excluded"] for t in times if t["excluded"]],
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


def compare(a: list[dict | None], b: list[dict | None], level: float = LEVEL,
            names: tuple[str, str] = ("A", "B")) -> dict:
    """B's time per run against A's: {ratio, low, high, level, dof, verdict
    ("faster", "slower", "same", or None), why (when None), a, b (the arms),
    marks (UNSTABLE, contended, not measured: to carry into the message)}.
    `names` are what the words call A and B."""
    A, B = _arm(a), _arm(b)
    out = {"level": level, "names": names, "a": A, "b": B, "ratio": None, "low": None,
           "high": None, "test": None,
           "dof": None, "verdict": None, "why": None,
           "marks": [*A["excluded"], *B["excluded"], *A["notes"], *B["notes"]]}
    if A["mean"] and B["mean"]:
        out["ratio"] = B["mean"] / A["mean"]
    for name, arm in zip(names, (A, B)):
        if not arm["n"]:
            out["why"] = (f"{name} has no usable trial ({'; '.join(arm['excluded'])}): "
                          + _advice(arm["excluded"]))
            return out
        if arm["method"] is None:
            out["why"] = (f"{name}'s one usable trial measured no spread (fewer than 2 "
                          "runs outside contention); run more repeats=, or more rounds=")
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


def _advice(excluded: list[str]) -> str:
    text = " ".join(excluded)
    if "UNSTABLE" in text:
        return ("run it again with a longer run_cap= (or more repeats=) so it settles, "
                "or on a quieter worker")
    if "contend" in text or "busy" in text:
        return "run it again when the machine is quiet, or on a worker nothing else uses"
    return "fix the failed trial and run it again"


def over(c: dict) -> str:
    """What the interval's spread came from: "over 2+2 trials"."""
    a, b = c["a"], c["b"]
    if a["method"] == b["method"] == "between":
        return f"over {a['n']}+{b['n']} trials"
    if a["method"] == b["method"]:
        return (f"from the {a['method']} within each trial; the spread within a trial misses "
                "the drift between trials")
    said = {"between": "{n} trials", "windows": "windows in 1 trial", "runs": "runs in 1 trial"}
    na, nb = c["names"]
    return (f"from {na}: {said[a['method']].format(n=a['n'])}, {nb}: "
            f"{said[b['method']].format(n=b['n'])}; the spread within a trial misses the "
            "drift between trials")


def phrase(c: dict) -> str:
    """"B/A ×1.02 (95% Welch interval ×0.97–×1.07 over 2+2 trials): no measurable
    difference", or why no verdict is given."""
    na, nb = c["names"]
    if c["verdict"] is None:
        ratio = f"{nb}/{na} ×{c['ratio']:.2f}, " if c["ratio"] else ""
        return f"{ratio}no verdict: {c['why']}"
    said = {"faster": f"{nb} is faster", "slower": f"{nb} is slower", "same": NO_DIFFERENCE}
    return (f"{nb}/{na} ×{c['ratio']:.2f} ({c['level']:.0%} {c['test']} t interval "
            f"×{c['low']:.2f}–"
            f"×{c['high']:.2f} {over(c)}): {said[c['verdict']]}")
