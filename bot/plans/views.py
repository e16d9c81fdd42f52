"""`/plan` replies as Slack payloads (the exports are export.py). Pure: the
same payload goes to Slack and to the console."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from bot import figures
from bot.blocks import chunks, clip, context, reply, section, table_text
from bot.fits import gpus, usable
from bot.plans import calibration, changes, estimate, kept_apart, parse, prices
from worker import i18n, summary
from worker.i18n import _
from worker.spec import LIVE_TIME_NOTE


def error(message: str) -> dict:
    return reply(f":x: {message}\nNothing was stored. `/plan help` lists the commands.")


def channel_settings(chosen: str | None, speaking: str) -> dict:
    """This channel's settings: the language it chose, or the bot's default."""
    name = i18n.LANGS[speaking]
    if chosen:
        line = _("This channel's language: {name} (`{code}`), set with `/plan settings "
                 "lang={code}`; `/plan settings lang=` goes back to the bot's default.",
                 name=name, code=speaking)
    else:
        line = _("This channel's language: {name} (`{code}`), the bot's default "
                 "(TRIALBOT_LANG); `/plan settings lang=ko` writes this channel's messages in "
                 "Korean.", name=name, code=speaking)
    return reply(line)


def help_text() -> dict:
    lines = ["*`/plan`* turns measured trials into GPU-hour estimates, cost (only from "
             "confirmed prices) and rent/buy guidance.",
             "• `/plan new NAME` · `/plan list` · `/plan NAME show` · `/plan NAME export`",
             "• `/plan NAME set key=value ...` fills the checklist and the planning facts",
             "• `/plan NAME block KIND runs=N [configs=M] [gpus=G] trial=T12[,T13] "
             "[note=\"open variable\"] [handoff=H]`, KIND one of "
             + ", ".join(parse.BLOCK_KINDS),
             "• `/plan NAME block scale runs=N sweep=S12 batch=32 [prompt=..] [gen=..]`: "
             "estimated from a sweep's fit (a depth sweep: `sweep=S12 layers=32`; it and a "
             "partial-depth trial are marked until a full-depth trial replaces them)",
             "• `/plan NAME lock` / `unlock` · `/plan NAME advise` · "
             "`/plan NAME actual KIND hours=H [prep=H data=H retries=H idle=H runs=N]` · "
             "`/plan NAME review`",
             "• `/plan NAME actual KIND slurm=JOBID[,JOBID...] [runs=N] [note=...]`: the actual "
             "from Slurm's accounting, read by a Slurm worker with sacct: GPU-h = Σ Elapsed × "
             "allocated GPUs (jobs that did not complete count as retries; no GPU allocated: "
             "node-hours), with MaxRSS and GPU TRES usage in its note",
             "• `/plan NAME actual KIND correct hours=H ...` replaces the block's recorded "
             "actuals · `/plan NAME actual KIND delete [#N]` removes them (or actual #N)",
             "• Corrections: `/plan NAME set key=` unsets an item · `/plan NAME block KIND "
             "correct runs=30 ...` · `/plan NAME block KIND delete` · `/plan price correct P7 "
             "2.39/h|source=...|date=...` · `/plan price delete P7` · `/plan prices all`; "
             "`/plan NAME history` shows every change (who, when, old and new value)",
             "• `/plan calibration`: how past intervals held their actuals, per GPU kind and "
             "workload; once 9 blocks of one have actuals, `show` adds their calibrated 90% "
             "interval and `review` says whether each actual fell inside",
             "• `/plan price H100 2.49/h source=URL date=YYYY-MM-DD` (also `buy=`, `resale=`, "
             "`power=0.7kW`; `/plan price electricity 0.12/kWh ...`) · `/plan prices`",
             "• Tag a trial as an actual: `/trial llm-infer ... plan=NAME block=KIND` (on the "
             "plan's target GPU; `gpu=any` runs it anywhere, kept apart as off-target)",
             "• `/plan digest weekly mon 09:00 Asia/Seoul` (any weekday, time, IANA timezone) · "
             "`/plan digest now` · `/plan digest off`: the weekly budget digest in this channel",
             "*Checklist*: " + "; ".join(f"`{k}` {v}" for k, v in parse.CHECKLIST.items()),
             "*Settings*: " + "; ".join(f"`{k}` {v}" for k, v in parse.SETTINGS.items()),
             "A run is one repetition of the trial's measured unit: one request for llm-infer, "
             "one run phase of a recipe's program."]
    return reply("\n".join(lines))


def open_items(plan: dict) -> list[str]:
    return [k for k in parse.CHECKLIST if not plan["facts"].get(k)]


def plan_list(plans: list[dict], everywhere: bool = False) -> dict:
    """This channel's plans; `everywhere` (an admin's list): every plan, with its channel."""
    if not plans:
        return reply(f"No plans{'' if everywhere else ' in this channel'} yet. Start one with "
                     "`/plan new NAME`.")
    lines = [f"• *{p['name']}*" + (f" in <#{p['channel']}>" if everywhere else "")
             + (" (locked)" if p["locked"] else "")
             + f" — target {p['facts'].get('gpu') or 'not set'}, {len(open_items(p))} "
               "checklist items open" for p in plans]
    return reply(f"Plans in {'every' if everywhere else 'this'} channel:\n" + "\n".join(lines))


# What `created` suggests for the first items still open, in this order.
FIRST_FACTS = (("gpu", "H100"), ("platform", "cuda"), ("paper", "..."))
def created(plan: dict) -> dict:
    name, facts = plan["name"], plan["facts"]
    given = ", ".join(f"{k}={changes.fact_value(k, v)}" for k, v in facts.items())
    missing = " ".join(f"{k}={example}" for k, example in FIRST_FACTS if not facts.get(k))
    step = f"`/plan {name} block baseline runs=N trial=T12`"
    next_ = (f"Next: `/plan {name} set {missing}`, then {step}." if missing
             else f"Next: {step}.")
    return reply(f"Plan *{name}* started" + (f" with {given}" if given else "")
                 + f". Open checklist items: {', '.join(open_items(plan)) or 'none'}.\n{next_}")


def block_warnings(plan: dict, est: dict, reports: list[dict]) -> list[str]:
    out = []
    target = plan["facts"].get("gpu")
    live = [name for r, name in zip(reports, est["trials"]) if summary.timed_live_on_cpu(r)]
    if live:
        out.append(f"{usable.names(live)} timed on the CPU under malloc=live: {LIVE_TIME_NOTE}. "
                   "This block's times overstate a glibc run's: re-run with malloc=auto "
                   "(or without malloc=) and re-add the block with the new trial")
    for r, name in zip(reports, est["trials"]):
        on = gpus.matches_gpu(r, target)
        if on is None:
            # the plan's, not the trial's: worded alike on every block, so `show` says it once
            out.append("no target GPU is set (`set gpu=H100`), so nobody checked that "
                       "this block's trials ran on it")
            break
        if not on:
            out.append(f"{name} ran on {estimate.env_kind(r)}, not the plan's target {target}: "
                       "its times and memory are not the target's")
        busy = r.get("contention") or {}
        if busy.get("flagged"):
            out.append(f"{name} ran on a busy machine — {busy['summary']}. This block carries "
                       "that slowdown: re-run it (the Re-run button on its card) and re-add the "
                       "block with the new trial")
        changed = {k: v for k, v in (r.get("requested") or {}).items()
                   if r["params"].get(k) != v}
        if changed:
            out.append(f"{name} was measured at a different config than requested ("
                       + ", ".join(f"{k}={r['params'][k]}, requested {v}"
                                   for k, v in changed.items()) + ")")
    lock = (plan.get("locked") or {}).get(est["kind"])
    diff = estimate.lock_differences(lock, est["config"], est["code"]) if lock else []
    if diff:
        out.append("NOT COMPARABLE with the locked plan: " + "; ".join(diff))
    marks = est.get("marks") or {}
    if marks.get("marked"):
        out.append(f"rests on marked sweep points: {', '.join(marks['marked'])}; their times "
                   "are suspect, so is the fit's — re-run them on a quiet machine")
    if marks.get("unmeasured"):
        out.append(f"contention not measured for {usable.names(marks['unmeasured'])} (reports "
                   "from before the probe): nobody checked the machine was quiet")
    if marks.get("unchecked"):
        out.append(f"the sweep's time fit is {marks['unchecked']}")
    if est.get("partial"):
        out.append(f"PREDICTED FROM A PARTIAL-DEPTH TRIAL ({est['partial']}): a full-depth "
                   "trial on the target replaces it — run it and re-add the block with "
                   "trial=T..")
    elif est.get("predicted"):
        out.append("predicted from a sweep's fit, not measured at this config: run a trial at "
                   "it and re-add the block to replace the prediction")
    return out


def hours_text(x: Decimal | None) -> str:
    """GPU-hours to three significant digits (bot/figures.py), each figure on its own."""
    return figures.gpu_hours(x)


def _interval(est: dict) -> str:
    if not est["interval"]:
        return "no interval"
    return figures.interval(*est["interval"])


def components_text(est: dict) -> str:
    return "\n".join(f"  {c['name']:<8} {hours_text(c['hours'])} GPU-h  ← {c['source']}"
                     for c in est["components"])


def block_added(plan: dict, est: dict, warnings: list[str], replaced: bool) -> dict:
    verb = "replaced" if replaced else "added"
    spread = (f"{_interval(est)}; {est['interval_note']}" if est["interval"]
              else est["interval_note"])
    text = (f"Plan *{plan['name']}*: {est['kind']} block {verb} — {hours_text(est['hours'])} GPU-h "
            f"({spread}), from {', '.join(est['trials'])} on "
            f"{est['env']}.\n```{components_text(est)}\n"
            f"  total    {hours_text(est['hours'])} GPU-h```")
    text += "".join(f"\n:warning: {w}" for w in warnings)
    return reply(text)


def cost_view(plan: dict, price_list: list[dict], today: dt.date):
    """(rent price or None, the line that says which)."""
    target = plan["facts"].get("gpu")
    if not target:
        return None, "cost unconfirmed: no target GPU set (`set gpu=H100`)"
    rent = prices.find(price_list, target, "rent")
    if rent is None:
        return None, (f"cost unconfirmed: no confirmed price for {target} "
                      f"(`/plan price {target} RATE/h source=... date=YYYY-MM-DD`)")
    return rent, "cost at " + prices.cited(rent, today)


def costs(plan: dict, ests: list, price_list: list[dict], today: dt.date) -> list[str]:
    """The cost cell of each block, then of the total. Money only from a confirmed
    rate, only for hours measured on the target GPU; the total is the sum of the
    blocks' costs as shown, so the column adds up."""
    rent, _ = cost_view(plan, price_list, today)
    if rent is None:
        return ["unconfirmed"] * (len(ests) + 1)
    stale = " (stale)" if prices.is_stale(rent, today) else ""
    cells, counted = [], []
    for _, e, trials in ests:
        if not all(gpus.matches_gpu(t["report"], plan["facts"].get("gpu")) for t in trials):
            cells.append(f"n/a: not measured on {plan['facts']['gpu']}")
            continue
        counted.append(e["hours"])
        cells.append(prices.money(prices.cost(e["hours"], rent), rent["currency"]) + stale)
    if len(counted) < len(ests):
        return cells + ["unconfirmed: not every block was measured on the target"]
    # The total's cost from the unrounded hours, rounded to the cent once.
    return cells + [prices.money(prices.cost(sum(counted, Decimal(0)), rent), rent["currency"])
                    + stale]


def calibrated_interval(est: dict, cal: dict | None) -> tuple[Decimal, Decimal] | None:
    """The block's GPU-hours × the calibrated multipliers, unrounded."""
    if not cal or not cal["calibrated"]:
        return None
    return tuple(est["hours"] * Decimal(repr(m)) for m in (cal["low"], cal["high"]))


def calibrated_total(ests: list, calib: list[dict]) -> tuple[Decimal, Decimal] | None:
    """The sums of the blocks' calibrated bounds; None unless every block is
    calibrated."""
    shown = [calibrated_interval(e, c) for (_, e, _), c in zip(ests, calib)]
    if not shown or not all(shown):
        return None
    return (sum((lo for lo, _ in shown), Decimal(0)), sum((hi for _, hi in shown), Decimal(0)))


def _calibrated_cell(est: dict, cal: dict) -> str:
    iv = calibrated_interval(est, cal)
    if iv is None:
        return f"uncalibrated ({cal['n']}/{cal['needed']})"
    return figures.interval(*iv)


def table_rows(plan: dict, ests: list, price_list: list[dict], today: dt.date,
               calib: list[dict] | None = None) -> list[list]:
    """The plan's table; with `calib` (one calibration per block) a column of
    the calibrated 90% intervals beside the uncalibrated ones."""
    cost = costs(plan, ests, price_list, today)
    rows = [["block", "runs", "GPU-h", "90% interval"] + (["calibrated 90%"] if calib else [])
            + ["cost"]]
    for i, ((_block, e, _trials), c) in enumerate(zip(ests, cost)):
        runs = f"{e['runs']}×{e['configs']}" + (f"×{e['gpus']}gpu" if e["gpus"] > 1 else "")
        kind = e["kind"] + (" (partial depth)" if e.get("partial") else "")
        rows.append([kind, runs, hours_text(e["hours"]), _interval(e)]
                    + ([_calibrated_cell(e, calib[i])] if calib else []) + [c])
    tot = estimate.total([e for _, e, _ in ests])
    iv = figures.interval(*tot["interval"]) if tot["interval"] else "no interval"
    extra = []
    if calib:
        ct = calibrated_total(ests, calib)
        extra = [figures.interval(*ct) if ct else "n/a: not every block calibrated"]
    rows.append(["total", "", hours_text(tot["hours"]), iv] + extra + [cost[-1]])
    return rows


def calibration_lines(ests: list, calib: list[dict]) -> list[str]:
    """Per block, the calibration's sentence and the pairs it used."""
    out = []
    for (_block, e, _trials), c in zip(ests, calib):
        line = f"• {e['kind']}: {c['text']}"
        if c["calibrated"]:
            lo, hi = calibrated_interval(e, c)
            line += f" → {figures.interval(lo, hi)} GPU-h"
        if c["used"]:
            names = c["used"][:12]
            line += ("; pairs: " + ", ".join(names)
                     + (f" and {len(c['used']) - 12} more" if len(c["used"]) > 12 else ""))
        out.append(line)
    return out


def tagged_lines(plan: dict, jobs: list[dict]) -> list[str]:
    """Trials tagged with the plan (its actuals), each checked against the
    target GPU and the lock: one that fails either is kept apart."""
    out = []
    for j in jobs:
        line = f"• {j['trial']} ({j['block']}): {j['status']}"
        why = kept_apart.why(plan, j)
        if why:
            why = why.replace("not comparable", "NOT COMPARABLE", 1)
            line += f" — {why}; kept out of the actual"
        out.append(line)
    return out


def show(plan: dict, ests: list, price_list: list[dict], today: dt.date,
         tagged: list[dict] | None = None, calib: list[dict] | None = None) -> dict:
    _, cost_line = cost_view(plan, price_list, today)
    f = plan["facts"]
    head = (f"*Plan {plan['name']}*" + (f" (locked {plan['locked']['at']})" if plan["locked"]
                                         else "")
            + f" — target {f.get('gpu') or 'not set'} ({f.get('platform') or 'platform not set'})"
            + f", rental {f.get('rental', 'per-block')}")
    if not ests:
        body = (f"No blocks yet: `/plan {plan['name']} block baseline runs=N trial=T12`.")
        text = f"{head}\n{body}"
    else:
        body = table_text(table_rows(plan, ests, price_list, today, calib))
        detail = "\n".join(f"{e['kind']} (from {', '.join(e['trials'])} on {e['env']}):\n"
                           f"{components_text(e)}" for _, e, _ in ests)
        text = f"{head}\n```{body}```\n{cost_line}\n```{detail}```"
        if calib:
            text += "\n*Calibration* (`/plan calibration`):\n" + "\n".join(
                calibration_lines(ests, calib))
    notes = [f"• {e['kind']}: {note_shown(plan, e['note'])}" for _, e, _ in ests
             if e.get("note")]
    warn = grouped_warnings(plan, ests)
    left = open_items(plan)
    actual = tagged_lines(plan, tagged or [])
    text += ("\n*Actual trials*:\n" + "\n".join(actual) if actual else "")
    text += ("\n*Open checklist items*: " + (", ".join(left) if left else "none")
             + ("\n*Open variables*:\n" + "\n".join(notes) if notes else "")
             + ("\n*Warnings*:\n" + "\n".join(warn) if warn else ""))
    blocks = [section(part) for part in chunks(text)]
    blocks.append(context("GPU-hours = measured wall time × GPUs; each component names its "
                           "trial and phase. Interval: runs' spread only (prep and data are "
                           "single measurements)."))
    return {"response_type": "in_channel", "text": text, "blocks": blocks}


NOTE_SHOWN = 1500  # characters of a block's note in `show`; the export has all of it


def note_shown(plan: dict, note: str) -> str:
    if len(note) <= NOTE_SHOWN:
        return note
    return (clip(note, NOTE_SHOWN) + f" (the whole note, {len(note):,} characters, is in "
            f"`/plan {plan['name']} export`)")


def grouped_warnings(plan: dict, ests: list) -> list[str]:
    """Each warning once, with the blocks it applies to (the same "no target GPU"
    on every block is one line, not one per block)."""
    seen: dict[str, list[str]] = {}
    for _block, e, ts in ests:
        for w in block_warnings(plan, e, [t["report"] for t in ts]):
            kinds = seen.setdefault(w, [])
            if e["kind"] not in kinds:
                kinds.append(e["kind"])
    return [f"• {', '.join(kinds)}: {w}" for w, kinds in seen.items()]


def locked(plan: dict) -> dict:
    lock = plan["locked"]
    lines = [f"Plan *{plan['name']}* locked on {lock['at']}: later trials of a block with a "
             "different config or code version are marked *not comparable*, and the input "
             f"conditions ({', '.join(parse.LOCKED_ITEMS)}) cannot be set until "
             f"`/plan {plan['name']} unlock`."]
    for kind, v in lock.items():
        if kind != "at":
            cfg = " ".join(f"{k}={x}" for k, x in v["config"].items())
            lines.append(f"• {kind}: `{cfg}`, code {v['code']} (from {', '.join(v['trials'])})")
    return reply("\n".join(lines))


def advice(plan: dict, a: dict) -> dict:
    if a["rule"] is None and a.get("undecided"):
        text = (f"*Plan {plan['name']}*: rule {a['undecided']} ({a['title']}) cannot be "
                "decided without these facts — I won't guess:\n"
                + "\n".join(f"• {m}" for m in a["missing"]))
    else:
        which = f"Rule {a['rule']} fired — {a['title']}" if a["rule"] else "No rule fired"
        text = (f"*Plan {plan['name']}*: {which}.\n{a['answer']}\nFacts: "
                + "; ".join(a.get("facts", [])))
        for other in a.get("also", []):
            text += f"\nAlso rule {other['rule']} ({other['title']}): {other['answer']}"
        if a.get("missing"):
            text += "\nStill missing: " + "; ".join(a["missing"])
    return reply(text)


def held_text(row: dict, est: dict, cal: dict | None) -> str:
    """Did the block's actual fall inside the interval shown for it: the
    calibrated one (from the other blocks of its scope) or else its own?"""
    pair = {"estimate": row["estimate"], "actual": row["actual"]}
    if not row["estimate"] > 0:
        return "no interval to judge it by (an estimate of 0 GPU-h)"
    if cal and cal["calibrated"]:
        mult, what = (cal["low"], cal["high"]), (f"the calibrated {cal['level']:.0%} interval "
                                              f"×{cal['low']:.2f}–×{cal['high']:.2f}")
    elif est.get("interval") and est["hours"] > 0:
        mult = tuple(float(x / est["hours"]) for x in est["interval"])
        what = "its uncalibrated 90% interval"
    else:
        return "no interval to judge it by"
    lo, hi = (row["estimate"] * m for m in mult)
    verdict = "inside" if calibration.inside(pair, mult) else "OUTSIDE"
    return f"{verdict} {what} ({figures.interval(lo, hi)} GPU-h)"


def review_cost(plan: dict, row: dict, est_trials: list[dict], rent: dict | None) -> str | None:
    """The block's estimated and actual cost at the rent that applies, or None
    (no confirmed rent, or the estimate's trials ran off the target)."""
    target = plan["facts"].get("gpu")
    if rent is None or not all(gpus.matches_gpu(t["report"], target) for t in est_trials):
        return None
    est, act = (prices.cost(Decimal(str(h)), rent) for h in (row["estimate"], row["actual"]))
    return (f"cost at P{rent['id']}: estimated {prices.money(est, rent['currency'])}, actual "
            f"{prices.money(act, rent['currency'])}")


def review(plan: dict, rows: list[dict], ests: list | None = None,
           calib: list[dict] | None = None, price_list: list[dict] | None = None,
           today: dt.date | None = None) -> dict:
    """With `price_list`, each block's cost at the rent that applies, and which."""
    lines = [f"*Plan {plan['name']}*: estimate against actual (GPU-hours)"]
    if not rows:
        lines.append(f"No blocks yet, so there is nothing to review: add one with `/plan "
                     f"{plan['name']} block baseline runs=N trial=T12`, then record what it "
                     f"really took with `/plan {plan['name']} actual baseline hours=H` or by "
                     f"tagging trials `plan={plan['name']} block=baseline`.")
    rent = prices.find(price_list or [], plan["facts"].get("gpu"), "rent")
    for i, r in enumerate(rows):
        apart = [f"    kept apart, {a}" for a in r.get("apart") or []]
        if r.get("actual") is None:
            lines.append(f"• {r['kind']}: no " + ("comparable " if apart else "")
                         + f"actual yet (tag trials with `plan={plan['name']} "
                         f"block={r['kind']}`, or `/plan {plan['name']} actual {r['kind']} "
                         "hours=H` or `slurm=JOBID`)")
            lines += apart
            continue
        rel = figures.change(r["estimate"], r["actual"])
        rel = f" ({rel})" if rel else ""
        idle = "" if r["idle_compared"] else " (idle left out on both sides)"
        lines.append(f"• *{r['kind']}*: estimated {figures.gpu_hours(r['estimate'])}, actual "
                     f"{figures.gpu_hours(r['actual'])} GPU-h{rel}{idle}, from "
                     f"{', '.join(r['sources'])}")
        if ests is not None:
            lines.append(f"    {held_text(r, ests[i][1], calib[i] if calib else None)}")
        lines += [f"    {name}: {figures.signed(value)} GPU-h ({why})"
                  for name, value, why in r["why"]]
        lines += [f"    config changed: {c}" for c in r["config_changes"]]
        lines += apart
        lines += [f"    memory, same method: {m}" for m in r.get("memory", [])]
        cost = review_cost(plan, r, ests[i][2], rent) if ests is not None else None
        lines += [f"    {cost}"] if cost else []
    if rent and any("    cost at P" in x for x in lines):
        lines.append(f"Costs at {prices.cited(rent, today)}.")
    return reply("\n".join(lines))


def slurm_asked(plan: dict, req: dict, registered: list[str], online: list[str]) -> dict:
    """The ephemeral answer to `actual KIND slurm=...`: asked, and where the result goes."""
    who = (f"a Slurm worker ({', '.join(online)} online)" if online else
           f"a Slurm worker; none is online now (registered: {', '.join(registered)}), so "
           "it waits for one")
    return reply(f"Asked {who} for Slurm's accounting of job {', '.join(req['jobs'])} "
                 f"(request A{req['id']}). The actual for *{plan['name']}* {req['block']} is "
                 f"recorded and posted in <#{plan['channel']}> when sacct has answered; "
                 "nothing is recorded for a job that is unknown or still running.")


def calibration_record(groups: list[tuple[str, dict, dict]], everywhere: bool) -> dict:
    """`/plan calibration`: per scope (scope, its record, its calibration now)."""
    where = "every channel's plans" if everywhere else "this channel's plans"
    if not groups:
        return reply(f"No actuals recorded yet in {where}, so every interval is uncalibrated: "
                     f"a scope (GPU kind and workload) is calibrated once "
                     f"{calibration.min_pairs()} of its blocks have actuals. Record them with "
                     "`/plan NAME actual KIND hours=H`, `slurm=JOBID`, or trials tagged "
                     "`plan=NAME block=KIND`.")
    lines = [f"*Calibration record* of {where}: each block's actual against the 90% interval "
             "the bot would have shown for it when it was recorded (calibrated from the earlier "
             "blocks of its scope once there were enough, else its own)"]
    for scope, rec, now in groups:
        lines.append(f"• *{scope}*: {len(rec['rows'])} past blocks; {rec['held']} of "
                     f"{rec['n']} intervals held the actual"
                     + (f" ({rec['no_interval']} had no interval)" if rec["no_interval"] else "")
                     + (f"; median absolute error {rec['median_error']:.0%}"
                        if rec["median_error"] is not None else ""))
        w = rec["worst"]
        if w:
            lines.append(f"    worst miss: {w['name']}, actual ×{w['ratio']:.2f} its estimate"
                         f" ({'inside' if w['held'] else 'OUTSIDE' if w['held'] is False else 'no'}"
                         f" interval); cause: {w['cause']}")
        lines.append(f"    now: {now['text']}")
        lines += [f"    left out: {x}" for x in rec["left_out"]]
    return reply("\n".join(lines))
