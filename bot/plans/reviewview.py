"""`/plan NAME review`, `/plan calibration` and the answer to a Slurm actual as
Slack payloads: each block's actual against the interval shown for it. Pure,
like views.py."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

from bot import figures
from bot.blocks import reply
from bot.fits import gpus
from bot.plans import calibration, estimate, prices
from bot.states import Json
from worker.i18n import _


def held_text(row: Json, est: Json, cal: Json | None) -> str:
    """Did the block's actual fall inside the interval shown for it: the
    calibrated one (from the other blocks of its scope) or else its own? A
    declared hand-off is added once: never scaled, never narrowing the interval."""
    if not row["estimate"] > 0:
        return _("no interval to judge it by (an estimate of 0 GPU-h)")
    declared = float(estimate.hours(est.get("declared_idle") or 0.0)) if row[
        "idle_compared"] else 0.0
    if cal and cal["calibrated"]:
        lo, hi = calibration.scaled(row["estimate"], (cal["low"], cal["high"]), declared)
    elif own := calibration.own_interval(est, row["estimate"]):
        lo, hi = own
    else:
        return _("no interval to judge it by")
    inside, shown = lo <= row["actual"] <= hi, figures.interval(lo, hi)
    if cal and cal["calibrated"]:
        values = dict(level=f"{cal['level']:.0%}", low=f"{cal['low']:.2f}",
                      high=f"{cal['high']:.2f}", interval=shown)
        return (_("inside the calibrated {level} interval ×{low}–×{high} ({interval} GPU-h)",
                  **values) if inside else
                _("OUTSIDE the calibrated {level} interval ×{low}–×{high} ({interval} GPU-h)",
                  **values))
    return (_("inside its uncalibrated 90% interval ({interval} GPU-h)", interval=shown)
            if inside else
            _("OUTSIDE its uncalibrated 90% interval ({interval} GPU-h)", interval=shown))


def review_cost(plan: Json, row: Json, est_trials: list[Json], rent: Json | None) -> str | None:
    """The block's estimated and actual cost at the rent that applies, or None
    (no confirmed rent, or the estimate's trials ran off the target)."""
    target = plan["facts"].get("gpu")
    if rent is None or not all(gpus.matches_gpu(t["report"], target) for t in est_trials):
        return None
    est, act = (prices.cost(Decimal(str(h)), rent) for h in (row["estimate"], row["actual"]))
    return _("cost at P{id}: estimated {estimated}, actual {actual}", id=rent["id"],
             estimated=prices.money(est, rent["currency"]),
             actual=prices.money(act, rent["currency"]))


def review(plan: Json, rows: list[Json], ests: list[estimate.Estimated] | None = None,
           calib: list[Json] | None = None, price_list: list[Json] | None = None,
           today: dt.date | None = None) -> Json:
    """With `price_list`, each block's cost at the rent that applies, and which."""
    lines = [_("*Plan {plan}*: estimate against actual (GPU-hours)", plan=plan["name"])]
    if not rows:
        lines.append(_("No blocks yet, so there is nothing to review: add one with `/plan "
                       "{plan} block baseline runs=N trial=T12`, then record what it really "
                       "took with `/plan {plan} actual baseline hours=H` or by tagging trials "
                       "`plan={plan} block=baseline`.", plan=plan["name"]))
    rent = prices.find(price_list or [], plan["facts"].get("gpu"), "rent")
    costed = False
    for i, r in enumerate(rows):
        apart = ["    " + _("kept apart, {why}", why=a) for a in r.get("apart") or []]
        if r.get("actual") is None:
            values = dict(plan=plan["name"], kind=r["kind"])
            lines.append(_("• {kind}: no comparable actual yet (tag trials with `plan={plan} "
                           "block={kind}`, or `/plan {plan} actual {kind} hours=H` or "
                           "`slurm=JOBID`)", **values) if apart else
                         _("• {kind}: no actual yet (tag trials with `plan={plan} "
                           "block={kind}`, or `/plan {plan} actual {kind} hours=H` or "
                           "`slurm=JOBID`)", **values))
            lines += apart
            continue
        rel = figures.change(r["estimate"], r["actual"])
        rel = f" ({rel})" if rel else ""
        idle = "" if r["idle_compared"] else " " + _("(idle left out on both sides)")
        lines.append(_("• *{kind}*: estimated {estimated}, actual {actual} GPU-h{change}, "
                       "from {sources}", kind=r["kind"],
                       estimated=figures.gpu_hours(r["estimate"]),
                       actual=figures.gpu_hours(r["actual"]), change=rel + idle,
                       sources=", ".join(r["sources"])))
        if ests is not None:
            lines.append(f"    {held_text(r, ests[i][1], calib[i] if calib else None)}")
        lines += [f"    {name}: {figures.signed(value)} GPU-h ({why})"
                  for name, value, why in r["why"]]
        lines += ["    " + _("config changed: {change}", change=c) for c in r["config_changes"]]
        lines += apart
        lines += ["    " + _("memory, same method: {memory}", memory=m)
                  for m in r.get("memory", [])]
        cost = review_cost(plan, r, ests[i][2], rent) if ests is not None else None
        lines += [f"    {cost}"] if cost else []
        costed = costed or bool(cost)
    if rent and costed:
        assert today is not None  # a rent comes only from price_list, given with today
        lines.append(_("Costs at {price}.", price=prices.cited(rent, today)))
    return reply("\n".join(lines))


def slurm_asked(plan: Json, req: Json, registered: list[str], online: list[str]) -> Json:
    """The ephemeral answer to `actual KIND slurm=...`: asked, and where the result goes."""
    values = dict(jobs=", ".join(req["jobs"]), id=req["id"], plan=plan["name"],
                  block=req["block"], channel=f"<#{plan['channel']}>")
    if online:
        asked = _("Asked a Slurm worker ({workers} online) for Slurm's accounting of job {jobs} "
                  "(request A{id}).", workers=", ".join(online), **values)
    else:
        asked = _("Asked a Slurm worker; none is online now (registered: {workers}), so it "
                  "waits for one for Slurm's accounting of job {jobs} (request A{id}).",
                  workers=", ".join(registered), **values)
    return reply(asked + " " + _("The actual for *{plan}* {block} is recorded and posted in "
                                 "{channel} when sacct has answered; nothing is recorded for a "
                                 "job that is unknown or still running.", **values))


def calibration_record(groups: list[tuple[str, Json, Json]], everywhere: bool,
                       across: Sequence[str] = ()) -> Json:
    """`/plan calibration`: per scope (scope, its record, its calibration now);
    `across`: the blocks ("PLAN KIND") whose actual is on another device than
    their estimate, kept out."""
    where = _("every channel's plans") if everywhere else _("this channel's plans")
    apart = (_("Kept out: {n} block(s) whose actual is on another device than the trials "
               "their estimate rests on ({blocks}); `/plan NAME review` says why.",
               n=len(across), blocks=", ".join(across)) if across else None)
    if not groups:
        first = (_("No actual on the same device as its estimate yet in {where}", where=where)
                 if across else _("No actuals recorded yet in {where}", where=where))
        text = _("{first}, so every interval is uncalibrated: a scope (GPU kind and workload) "
                 "is calibrated once {n} of its blocks have actuals. Record them with "
                 "`/plan NAME actual KIND hours=H`, `slurm=JOBID`, or trials tagged "
                 "`plan=NAME block=KIND`.", first=first, n=calibration.min_pairs())
        return reply(f"{text}\n{apart}" if apart else text)
    lines = [_("*Calibration record* of {where}: each block's actual against the 90% interval "
               "the bot would have shown for it when it was recorded (calibrated from the "
               "earlier blocks of its scope once there were enough, else its own)",
               where=where)]
    for scope, rec, now in groups:
        line = _("• *{scope}*: {blocks} past blocks; {held} of {n} intervals held the actual",
                 scope=scope, blocks=len(rec["rows"]), held=rec["held"], n=rec["n"])
        if rec["no_interval"]:
            line += " " + _("({n} had no interval)", n=rec["no_interval"])
        if rec["median_error"] is not None:
            line += "; " + _("median absolute error {error}",
                             error=f"{rec['median_error']:.0%}")
        lines.append(line)
        w = rec["worst"]
        if w:
            held = (_("inside interval") if w["held"] else
                    _("OUTSIDE interval") if w["held"] is False else _("no interval"))
            lines.append("    " + _("worst miss: {name}, actual ×{ratio} its estimate ({held}); "
                                    "cause: {cause}", name=w["name"], ratio=f"{w['ratio']:.2f}",
                                    held=held, cause=w["cause"]))
        lines.append("    " + _("now: {calibration}", calibration=now["text"]))
        lines += ["    " + _("left out: {what}", what=x) for x in rec["left_out"]]
    if apart:
        lines.append(apart)
    return reply("\n".join(lines))
