"""`/plan` replies as Slack payloads (the exports are export.py). Pure: the
same payload goes to Slack and to the console."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from bot import figures
from bot.blocks import chunks, clip, context, section, table_text
from bot.blocks import reply as reply  # bot/plans/command.py answers with views.reply
from bot.fits import gpus, usable
from bot.plans import changes, estimate, footing, kept_apart, measured, parse, prices
from bot.states import Json
from bot.trials.views import status_word
from worker import i18n
from worker.api import LIVE_TIME_NOTE, summary
from worker.i18n import _, pgettext


def error(message: str) -> Json:
    return reply(f":x: {message}\n" + _("Nothing was stored. `/plan help` lists the commands."))


def channel_settings(chosen: str | None, speaking: str, currency: str | None = None) -> Json:
    """This channel's settings: the language it chose, or the bot's default, and
    the currency a price typed here without one is read in."""
    name = i18n.LANGS[speaking]
    if chosen:
        line = _("This channel's language: {name} (`{code}`), set with `/plan settings "
                 "lang={code}`; `/plan settings lang=` goes back to the bot's default.",
                 name=name, code=speaking)
    else:
        line = _("This channel's language: {name} (`{code}`), the bot's default "
                 "(TRIALBOT_LANG); `/plan settings lang=ko` writes this channel's messages in "
                 "Korean.", name=name, code=speaking)
    money = (_("Its currency: {code}; a price typed here without one is read in {code} "
               "(`/plan settings currency=` clears it).", code=currency) if currency else
             _("No currency set: a price typed here without one keeps none; `/plan settings "
               "currency=USD` (or KRW, EUR...) sets one."))
    return reply(f"{line}\n{money}")


def open_items(plan: Json) -> list[str]:
    return [k for k in parse.CHECKLIST if not plan["facts"].get(k)]


def plan_list(plans: list[Json], everywhere: bool = False) -> Json:
    """This channel's plans; `everywhere` (an admin's list): every plan, with its channel."""
    if not plans:
        return reply(_("No plans yet. Start one with `/plan new NAME`.") if everywhere else
                     _("No plans in this channel yet. Start one with `/plan new NAME`."))
    lines = [_("• {plan} — target {gpu}, {n} checklist items open", plan=_plan_named(p, everywhere),
               gpu=p["facts"].get("gpu") or _("not set"), n=len(open_items(p)))
             for p in plans]
    head = _("Plans in every channel:") if everywhere else _("Plans in this channel:")
    return reply(head + "\n" + "\n".join(lines))


def _plan_named(p: Json, everywhere: bool) -> str:
    name = f"*{p['name']}*"
    if everywhere:
        name = _("{plan} in {channel}", plan=name, channel=f"<#{p['channel']}>")
    return _("{plan} (locked)", plan=name) if p["locked"] else name


# What `created` suggests for the first items still open, in this order.
FIRST_FACTS = (("gpu", "H100"), ("platform", "cuda"), ("paper", "..."))
def created(plan: Json) -> Json:
    name, facts = plan["name"], plan["facts"]
    given = ", ".join(f"{k}={changes.fact_value(k, v)}" for k, v in facts.items())
    missing = " ".join(f"{k}={example}" for k, example in FIRST_FACTS if not facts.get(k))
    items = ", ".join(open_items(plan)) or _("none")
    head = (_("Plan *{plan}* started with {given}. Open checklist items: {items}.", plan=name,
              given=given, items=items) if given else
            _("Plan *{plan}* started. Open checklist items: {items}.", plan=name, items=items))
    next_ = (_("Next: `/plan {plan} set {missing}`, then `/plan {plan} block baseline runs=N "
               "trial=T12`.", plan=name, missing=missing) if missing else
             _("Next: `/plan {plan} block baseline runs=N trial=T12`.", plan=name))
    note = gpus.unlisted_note(facts.get("gpu"))
    return reply(f"{head}\n" + (f"{note}.\n" if note else "") + next_)


def block_warnings(plan: Json, est: Json, reports: list[Json]) -> list[str]:
    """What `show` warns of for one block: each of its trials' own marks (busy,
    unstable, malloc=live, another config), whatever the plan has or lacks, then
    the plan's (target, lock) and the block's (prediction)."""
    out = []
    target = plan["facts"].get("gpu")
    live = [name for r, name in zip(reports, est["trials"]) if summary.timed_live_on_cpu(r)]
    if live:
        out.append(_("{trials} timed on the CPU under malloc=live: {note}. This block's times "
                     "overstate a glibc run's: re-run with malloc=auto (or without malloc=) and "
                     "re-add the block with the new trial", trials=usable.names(live),
                     note=_(LIVE_TIME_NOTE)))
    if not target:
        # the plan's, not the trial's: worded alike on every block, so `show` says it once
        out.append(_("no target GPU is set (`set gpu=H100`), so nobody checked that "
                     "this block's trials ran on it; each block's hours are on its trials' own "
                     "device, named on its line"))
    off = [name for r, name in zip(reports, est["trials"]) if gpus.matches_gpu(r, target) is False]
    if off:
        out.append(_("{trials} ran on {env}, not the plan's target {target}: the block's time "
                     "is not a time on {target} and is left out of the total and the cost (its "
                     "memory still sizes the block); {missing}", trials=usable.names(off),
                     env=est.get("off_target") or est["env"], target=target,
                     missing=footing.missing_trial(plan.get("name", "NAME"), est, target)))
    for r, name in zip(reports, est["trials"]):
        out += _trial_marks(r, name)
    lock = (plan.get("locked") or {}).get(est["kind"])
    diff = estimate.lock_differences(lock, est["config"], est["code"]) if lock else []
    if diff:
        out.append(_("NOT COMPARABLE with the locked plan: {differences}",
                     differences="; ".join(diff)))
    marks = est.get("marks") or {}
    if marks.get("marked"):
        out.append(_("rests on marked sweep points: {points}; their times are suspect, so is "
                     "the fit's — re-run them on a quiet machine",
                     points=", ".join(marks["marked"])))
    if marks.get("unmeasured"):
        out.append(_("contention not measured for {trials} (reports from before the probe): "
                     "nobody checked the machine was quiet",
                     trials=usable.names(marks["unmeasured"])))
    if marks.get("unchecked"):
        out.append(_("the sweep's time fit is {state}", state=marks["unchecked"]))
    if est.get("partial"):
        out.append(_("PREDICTED FROM A PARTIAL-DEPTH TRIAL ({trial}): a full-depth trial on "
                     "the target replaces it — run it and re-add the block with trial=T..",
                     trial=est["partial"]))
    elif est.get("predicted"):
        out.append(_("predicted from a sweep's fit, not measured at this config: run a trial "
                     "at it and re-add the block to replace the prediction"))
    return out


def _trial_marks(r: Json, name: str) -> list[str]:
    """The warnings one trial's report carries about its own time figures."""
    out = []
    if (r.get("contention") or {}).get("flagged"):
        out.append(_("{trial} ran on a busy machine — {summary}. This block carries that "
                     "slowdown: re-run it (the Re-run button on its card) and re-add the "
                     "block with the new trial", trial=name, summary=summary.busy_line(r)))
    marks = usable.marks(r)
    if marks["unstable"]:
        spread = (f"{marks['spread']:.1%}" if marks["spread"] is not None else "?")
        out.append(_("{trial} was UNSTABLE (IQR/median {spread}): its time per run is loose; "
                     "re-run it on a quiet machine and re-add the block with the new trial",
                     trial=name, spread=spread))
    changed = {k: v for k, v in (r.get("requested") or {}).items() if r["params"].get(k) != v}
    if changed:
        out.append(_("{trial} was measured at a different config than requested "
                     "({changes})", trial=name, changes=", ".join(
                         _("{key}={got}, requested {wanted}", key=k, got=r["params"][k],
                           wanted=v) for k, v in changed.items())))
    return out


def hours_text(x: Decimal | None) -> str:
    """GPU-hours to three significant digits (bot/figures.py), each figure on its own."""
    return figures.gpu_hours(x)


def _interval(est: Json) -> str:
    if not est["interval"]:
        return _("no interval")
    return figures.interval(*est["interval"])


def components_text(est: Json, unit: str = "GPU-h") -> str:
    return "\n".join(f"  {c['name']:<8} {hours_text(c['hours'])} {unit}  ← {c['source']}"
                     for c in est["components"])


def _detail(est: Json, target: str | None) -> str:
    """A block's components under its heading; a block measured off the target
    is headed so, in hours of its own device."""
    values = dict(kind=est["kind"], trials=", ".join(est["trials"]), env=est["env"])
    if est.get("off_target"):
        return (_("{kind} (from {trials} on {env}), {apart}:", apart=footing.apart_text(
                    est, target), **values) + "\n" + components_text(est, "h"))
    return _("{kind} (from {trials} on {env}):", **values) + "\n" + components_text(est)


def block_added(plan: Json, est: Json, warnings: list[str], replaced: bool) -> Json:
    spread = (f"{_interval(est)}; {est['interval_note']}" if est["interval"]
              else est["interval_note"])
    values = dict(plan=plan["name"], kind=est["kind"], hours=hours_text(est["hours"]),
                  spread=spread, trials=", ".join(est["trials"]), env=est["env"])
    unit = "GPU-h"
    if est.get("off_target"):  # another device's time: never worded as target GPU-hours
        unit, apart = "h", footing.apart_text(est, plan["facts"]["gpu"])
        head = (_("Plan *{plan}*: {kind} block replaced — {hours} h ({spread}), from {trials}, "
                  "{apart}.", apart=apart, **values) if replaced else
                _("Plan *{plan}*: {kind} block added — {hours} h ({spread}), from {trials}, "
                  "{apart}.", apart=apart, **values))
    else:
        head = (_("Plan *{plan}*: {kind} block replaced — {hours} GPU-h ({spread}), from "
                  "{trials} on {env}.", **values) if replaced else
                _("Plan *{plan}*: {kind} block added — {hours} GPU-h ({spread}), from {trials} "
                  "on {env}.", **values))
    text = (f"{head}\n```{components_text(est, unit)}\n"
            f"  {_('total'):<8} {hours_text(est['hours'])} {unit}```")
    text += "".join(f"\n:warning: {w}" for w in warnings)
    return reply(text)


def cost_view(plan: Json, price_list: list[Json], today: dt.date) -> tuple[Json | None, str]:
    """(rent price or None, the line that says which)."""
    target = plan["facts"].get("gpu")
    if not target:
        return None, _("cost unconfirmed: no target GPU set (`set gpu=H100`)")
    rent = prices.find(price_list, target, "rent")
    if rent is None:
        return None, _("cost unconfirmed: no confirmed price for {gpu} (`/plan price {gpu} "
                       "RATE/h source=... date=YYYY-MM-DD`)", gpu=target)
    return rent, _("cost at {price}", price=prices.cited(rent, today))


def costs(plan: Json, ests: list[estimate.Estimated], price_list: list[Json],
          today: dt.date) -> list[str]:
    """The cost cell of each block, then of the total. Money only from a confirmed
    rate, only for hours measured on the target GPU; the total is the sum of the
    blocks' costs as shown, so the column adds up."""
    rent, _line = cost_view(plan, price_list, today)
    if rent is None:
        return [_("unconfirmed")] * (len(ests) + 1)
    stale = prices.is_stale(rent, today)
    cells, counted = [], []
    for _block, e, _trials in ests:
        if e.get("off_target"):  # another device's hours: no money at the target's rate
            cells.append(_("n/a: not measured on {gpu}", gpu=plan["facts"]["gpu"]))
            continue
        counted.append(e["hours"])
        cells.append(_stale(prices.money(prices.cost(e["hours"], rent), rent["currency"]), stale))
    if not counted:
        return cells + [_("n/a: no block measured on {gpu}", gpu=plan["facts"]["gpu"])]
    # The total's cost from the unrounded hours, rounded to the cent once; like the
    # total's hours, it leaves out the blocks measured off the target.
    money = _stale(prices.money(prices.cost(sum(counted, Decimal(0)), rent),
                                rent["currency"]), stale)
    if len(counted) < len(ests):
        money = _("{money}, {gpu} blocks only", money=money, gpu=plan["facts"]["gpu"])
    return cells + [money]


def _stale(money: str, stale: bool) -> str:
    return _("{money} (stale)", money=money) if stale else money


def calibrated_interval(est: Json, cal: Json | None) -> tuple[Decimal, Decimal] | None:
    """The block's GPU-hours × the calibrated multipliers, unrounded; a declared
    hand-off in them is added once, unscaled."""
    if not cal or not cal["calibrated"]:
        return None
    declared = estimate.hours(est.get("declared_idle") or 0.0)
    return tuple((est["hours"] - declared) * Decimal(repr(m)) + declared
                 for m in (cal["low"], cal["high"]))


def calibrated_total(ests: list[estimate.Estimated], calib: list[Json]
                     ) -> tuple[Decimal, Decimal] | None:
    """The sums of the blocks' calibrated bounds; None unless every block is
    calibrated."""
    shown = [calibrated_interval(e, c) for (_block, e, _trials), c in zip(ests, calib)
             if not e.get("off_target")]  # left out of the total as their hours are
    bounds = [b for b in shown if b is not None]
    if not shown or len(bounds) < len(shown):
        return None
    return (sum((lo for lo, _hi in bounds), Decimal(0)),
            sum((hi for _lo, hi in bounds), Decimal(0)))


def _calibrated_cell(est: Json, cal: Json) -> str:
    iv = calibrated_interval(est, cal)
    if iv is None:
        return _("uncalibrated ({n}/{needed})", n=cal["n"], needed=cal["needed"])
    return figures.interval(*iv)


def table_rows(plan: Json, ests: list[estimate.Estimated], price_list: list[Json], today: dt.date,
               calib: list[Json] | None = None) -> list[list[str]]:
    """The plan's table; with `calib` (one calibration per block) a column of
    the calibrated 90% intervals beside the uncalibrated ones."""
    cost = costs(plan, ests, price_list, today)
    rows = [[_("block"), pgettext("column", "runs"), "GPU-h", _("90% interval")]
            + ([_("calibrated 90%")] if calib else []) + [_("cost")]]
    for i, ((_block, e, _trials), c) in enumerate(zip(ests, cost)):
        runs = f"{e['runs']}×{e['configs']}" + (f"×{e['gpus']}gpu" if e["gpus"] > 1 else "")
        kind = _("{kind} (partial depth)", kind=e["kind"]) if e.get("partial") else e["kind"]
        if e.get("off_target"):  # its time is shown apart, below the table
            rows.append([kind, runs, _("off target"), "—"]
                        + (["—"] if calib else []) + [c])
            continue
        rows.append([kind, runs, hours_text(e["hours"]), _interval(e)]
                    + ([_calibrated_cell(e, calib[i])] if calib else []) + [c])
    tot = estimate.total([e for _block, e, _trials in ests])
    iv = figures.interval(*tot["interval"]) if tot["interval"] else _("no interval")
    if tot["left_out"] and len(tot["left_out"]) == len(ests):
        iv = "—"
    extra = []
    if calib:
        ct = calibrated_total(ests, calib)
        extra = [figures.interval(*ct) if ct else "—" if iv == "—" else
                 _("n/a: not every block calibrated")]
    shown = (hours_text(tot["hours"]) if len(tot["left_out"]) < len(ests) else
             _("n/a: no block measured on {gpu}", gpu=plan["facts"].get("gpu")))
    rows.append([_("total"), "", shown, iv] + extra + [cost[-1]])
    return rows


def calibration_lines(ests: list[estimate.Estimated], calib: list[Json]) -> list[str]:
    """Per block, the calibration's sentence and the pairs it used."""
    out = []
    for (_block, e, _trials), c in zip(ests, calib):
        if e.get("off_target"):  # no target time to calibrate
            continue
        line = f"• {e['kind']}: {c['text']}"
        bounds = calibrated_interval(e, c)  # None unless calibrated
        if bounds is not None:
            line += f" → {figures.interval(*bounds)} GPU-h"
        if c["used"]:
            names = ", ".join(c["used"][:12])
            line += "; " + (_("pairs: {names} and {more} more", names=names,
                              more=len(c["used"]) - 12) if len(c["used"]) > 12 else
                            _("pairs: {names}", names=names))
        out.append(line)
    return out


def tagged_lines(plan: Json, jobs: list[Json]) -> list[str]:
    """Trials tagged with the plan (its actuals), each checked against the
    target GPU and the lock: one that fails either is kept apart."""
    out = []
    for j in jobs:
        line = f"• {j['trial']} ({j['block']}): {status_word(j['status'])}"
        why = kept_apart.why(plan, j)
        if why:
            why = why.replace("not comparable", "NOT COMPARABLE", 1)
            line += " — " + _("{why}; kept out of the actual", why=why)
        out.append(line)
    return out


def show(plan: Json, ests: list[estimate.Estimated], price_list: list[Json], today: dt.date,
         tagged: list[Json] | None = None, calib: list[Json] | None = None,
         fits: str = "") -> Json:
    """The plan's table and its paragraphs; `fits`: the *Fits on* paragraph
    (bot/plans/fitson.section), computed by the caller."""
    _rent, cost_line = cost_view(plan, price_list, today)
    f = plan["facts"]
    values = dict(plan=plan["name"], gpu=f.get("gpu") or _("not set"),
                  platform=f.get("platform") or _("platform not set"),
                  rental=f.get("rental", "per-block"))
    head = (_("*Plan {plan}* (locked {at}) — target {gpu} ({platform}), rental {rental}",
              at=plan["locked"]["at"], **values) if plan["locked"] else
            _("*Plan {plan}* — target {gpu} ({platform}), rental {rental}", **values))
    if not ests:
        body = _("No blocks yet: `/plan {plan} block baseline runs=N trial=T12`.",
                 plan=plan["name"])
        text = f"{head}\n{body}"
    else:
        body = table_text(table_rows(plan, ests, price_list, today, calib))
        detail = "\n".join(_detail(e, f.get("gpu")) for _block, e, _trials in ests)
        text = f"{head}\n```{body}```\n{cost_line}\n```{detail}```"
        left_out = estimate.total([e for _block, e, _trials in ests])["left_out"]
        if left_out:
            text += "\n" + _("The total and its cost leave out {kinds}: measured on another "
                             "device than {gpu}, its hours are not hours on {gpu} (*Warnings* "
                             "names the trial still missing).", kinds=", ".join(left_out),
                             gpu=f["gpu"])
        if calib:
            text += "\n" + _("*Calibration* (`/plan calibration`):") + "\n" + "\n".join(
                calibration_lines(ests, calib))
    notes = [f"• {e['kind']}: {note_shown(plan, e['note'])}" for _block, e, _trials in ests
             if e.get("note")]
    warn = grouped_warnings(plan, ests)
    left = open_items(plan)
    actual = tagged_lines(plan, tagged or [])
    text += ("\n" + _("*Actual trials*:") + "\n" + "\n".join(actual) if actual else "")
    text += f"\n{fits}" if fits else ""
    kept, kept_blocks = record(plan)
    rest = (_("*Open checklist items*: {items}", items=", ".join(left) if left else _("none"))
            + ("\n" + _("*Open variables*:") + "\n" + "\n".join(notes) if notes else "")
            + ("\n" + _("*Warnings*:") + "\n" + "\n".join(warn) if warn else ""))
    blocks = ([section(part) for part in chunks(text)] + kept_blocks
              + [section(part) for part in chunks(rest)])
    blocks.append(context(_("GPU-hours = measured wall time × GPUs; each component names its "
                            "trial and phase. Interval: runs' spread only (prep and data are "
                            "single measurements).")))
    return {"response_type": "in_channel", "text": f"{text}\n{kept}\n{rest}", "blocks": blocks}


RECORD_SHOWN = 150  # characters of a checklist value in `show`; the export has all of it
FIELDS = 10  # Slack's most fields in one section


def record(plan: Json) -> tuple[str, list[Json]]:
    """The checklist's filled items with their values, the plan's record, as
    text and as sections of two-column fields (10 at most each)."""
    filled = [(k, changes.fact_value(k, v)) for k, v in
              ((k, plan["facts"].get(k)) for k in parse.CHECKLIST) if v]
    if not filled:
        head = _("*Record*: no checklist item is filled yet (`/plan {plan} set paper=... "
                 "repo=...`)", plan=plan["name"])
        return head, [section(head)]
    shown = [(k, clip(v, RECORD_SHOWN)) for k, v in filled]
    values = dict(n=len(filled), total=len(parse.CHECKLIST), plan=plan["name"])
    head = (_("*Record* ({n} of {total} checklist items filled; a value cut short here is "
              "whole in `/plan {plan} export`):", **values) if shown != filled else
            _("*Record* ({n} of {total} checklist items filled):", **values))
    fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in shown]
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": head},
               "fields": fields[:FIELDS]}]
    blocks += [{"type": "section", "fields": fields[i:i + FIELDS]}
               for i in range(FIELDS, len(fields), FIELDS)]
    return head + "\n" + "\n".join(f"• {k}: {v}" for k, v in shown), blocks


NOTE_SHOWN = 1500  # characters of a block's note in `show`; the export has all of it


def note_shown(plan: Json, note: str) -> str:
    if len(note) <= NOTE_SHOWN:
        return note
    return clip(note, NOTE_SHOWN) + " " + _("(the whole note, {n} characters, is in "
                                            "`/plan {plan} export`)", n=f"{len(note):,}",
                                            plan=plan["name"])


def grouped_warnings(plan: Json, ests: list[estimate.Estimated]) -> list[str]:
    """Each warning once, with the blocks it applies to (the same "no target GPU"
    on every block is one line, not one per block)."""
    seen: dict[str, list[str]] = {}
    for _block, e, ts in ests:
        for w in block_warnings(plan, e, [t["report"] for t in ts]):
            kinds = seen.setdefault(w, [])
            if e["kind"] not in kinds:
                kinds.append(e["kind"])
    return [f"• {', '.join(kinds)}: {w}" for w, kinds in seen.items()]


def locked(plan: Json) -> Json:
    lock = plan["locked"]
    lines = [_("Plan *{plan}* locked on {at}: later trials of a block with a different "
               "config or code version are marked *not comparable*, and the input conditions "
               "({items}) cannot be set until `/plan {plan} unlock`.", plan=plan["name"],
               at=lock["at"], items=", ".join(parse.LOCKED_ITEMS))]
    for kind, v in lock.items():
        if kind != "at":
            cfg = " ".join(f"{k}={x}" for k, x in v["config"].items())
            lines.append(_("• {kind}: `{config}`, code {code} (from {trials})", kind=kind,
                           config=cfg, code=measured.code_text(v["code"]),
                           trials=", ".join(v["trials"])))
    return reply("\n".join(lines))


def advice(plan: Json, a: Json) -> Json:
    blocked = "".join(":no_entry: " + _("*Blocking*: {why}", why=b) + "\n"
                      for b in a.get("blocking", []))
    return reply(blocked + _advice_text(plan, a))


def _advice_text(plan: Json, a: Json) -> str:
    if a["rule"] is None and a.get("undecided"):
        text = (_("*Plan {plan}*: rule {rule} ({title}) cannot be decided without these facts "
                  "— I won't guess:", plan=plan["name"], rule=a["undecided"],
                  title=_(a["title"]))
                + "\n" + "\n".join(f"• {m}" for m in a["missing"]))
    else:
        which = (_("*Plan {plan}*: Rule {rule} fired — {title}.", plan=plan["name"],
                   rule=a["rule"], title=_(a["title"])) if a["rule"] else
                 _("*Plan {plan}*: No rule fired.", plan=plan["name"]))
        text = (f"{which}\n{a['answer']}\n"
                + _("Facts: {facts}", facts="; ".join(a.get("facts", []))))
        for other in a.get("also", []):
            text += "\n" + _("Also rule {rule} ({title}): {answer}", rule=other["rule"],
                             title=_(other["title"]), answer=other["answer"])
        if a.get("missing"):
            text += "\n" + _("Still missing: {facts}", facts="; ".join(a["missing"]))
    return text
