"""`/plan`: what the command does, for every adapter (Slack, console).
Parse → read the store → the pure core (planner, advice, prices) → a reply.
Bad input stores nothing."""
from __future__ import annotations

import datetime as dt
import logging

from bot import figures
from bot.context import HiddenPlan, PlanUnreachable, Postable, unwritable_text
from bot.plans import (
    advice,
    calibration,
    changes,
    estimate,
    export,
    footing,
    parse,
    priceparse,
    review,
    reviewview,
    service,
    views,
)
from bot.plans.parse import PlanError
from bot.store import DuplicateRequest, Unwritable
from bot.trials import workers
from bot.words import normalize
from worker import i18n
from worker.i18n import N_, _

log = logging.getLogger("trialbot.plans")


def handle(ctx, text: str, user: str, channel: str, today: dt.date,
           now: dt.datetime | None = None, request: str | None = None,
           response_url: str | None = None) -> dict:
    """`request` is Slack's trigger_id: a retried `actual ... slurm=` asks once.
    `response_url` reaches the requester if the channel refuses what is posted.
    The answer speaks the channel's language (`/plan settings lang=ko`)."""
    with i18n.using(ctx.store.channel_lang(channel)):
        return _handle(ctx, text, user, channel, today, now, request, response_url)


def _handle(ctx, text, user, channel, today, now, request, response_url) -> dict:
    need = None
    text = normalize(text)  # once, here: every parser and every echo sees the plain words
    try:
        cmd = parse.parse(text, today)
        if cmd.action == "actual":
            cmd.args["request"] = request
        need, what = NEEDS.get(cmd.action, (None, None))
        # (a plan is reached only in its own channel or by an admin, see _plan, so
        # this channel's right is the plan's too: an admin has it everywhere)
        refused = need and ctx.allows(need, user, channel, what)
        if refused:
            return views.reply(":lock: " + _("{refused} Nothing was changed.", refused=refused))
        if (cmd.action in POSTS or (cmd.action == "actual" and cmd.args.get("slurm"))) \
                and ctx.channels.cached(channel) is not Postable.YES:
            # Its messages go to this channel. Slack is asked after the reply, never
            # before it; if the bot may not post there, the outbox takes them to the
            # requester (this command's response_url, else a direct message) instead.
            ctx.channels.confirm(channel)
        if cmd.action.startswith("digest"):  # bot/digest/command.py, through the context
            return ctx.digest_command(ctx, cmd, user, channel,
                                      now or dt.datetime.now(dt.timezone.utc), response_url)
        if cmd.action == "export":
            cmd.args["response_url"] = response_url
        return ACTIONS[cmd.action](ctx, cmd, user, channel, today)
    except PlanHidden as exc:
        return views.reply(":lock: " + (_("{refused} Nothing was changed.", refused=exc)
                                          if need else str(exc)))
    except (PlanError, estimate.EstimateError) as exc:
        return views.error(str(exc))
    except Unwritable as exc:  # locked past the ack's budget, full, read-only
        return views.reply(":x: " + _("Nothing was stored: {why}.", why=unwritable_text(exc)))
    except Exception:  # noqa: BLE001 - a bug must still get an answer, and a log line
        log.exception("/plan %r failed", text)
        return views.error(_("Something went wrong on our side answering this; it is in the "
                             "bot's log. Try again, or report it with the command you typed."))


POSTS = ("export", "digest-now", "digest-weekly")  # actions that post in the channel later

# What each /plan action needs (bot.access); reading is open to anyone (a plan
# in its own channel, see _plan).
NEEDS = {"price": ("admin", N_("record prices")),
         "price-correct": ("admin", N_("correct prices")),
         "price-delete": ("admin", N_("delete prices")),
         "digest-weekly": ("admin", N_("schedule the digest")),
         "digest-off": ("admin", N_("stop the digest")),
         **{a: ("run", N_("change plans")) for a in ("new", "set", "block", "block-correct",
                                                 "block-delete", "lock", "unlock", "actual")},
         **{a: ("run", N_("post in this channel")) for a in ("export", "digest-now")}}


class PlanHidden(PlanError):
    """The plan lives in another channel (perhaps a private one)."""


def _plan(ctx, name: str, user: str, channel: str) -> dict:
    """The plan, if `user` may reach it from `channel` (as `/trial status`: a
    plan may live in a private channel); its name is all a refusal tells."""
    try:
        return ctx.plan(name, user, channel)
    except HiddenPlan as exc:
        raise PlanHidden(exc.message) from None
    except PlanUnreachable as exc:
        raise PlanError(exc.message) from None


def _help(ctx, cmd, user, channel, today):
    return views.help_text()


def _list(ctx, cmd, user, channel, today):
    return views.plan_list(*ctx.visible_plans(user, channel))


def _new(ctx, cmd, user, channel, today):
    if not ctx.store.add_plan(cmd.plan, channel, user, cmd.args["facts"]):
        if ctx.store.plan(cmd.plan)["channel"] != channel:  # names are shared by all
            raise PlanError(_("A plan `{plan}` exists already in another channel; choose "
                              "another name", plan=cmd.plan))
        raise PlanError(_("A plan `{plan}` exists already; `/plan {plan} show` shows it, "
                          "or choose another name", plan=cmd.plan))
    return views.created(ctx.store.plan(cmd.plan))


def _locked_refusal(plan: dict, what: str) -> PlanError:
    return PlanError(_("{what} is fixed while plan {plan} is locked (since {at}); `/plan {plan} "
                       "unlock` first (its estimates then need re-checking)",
                       what=what, plan=plan["name"], at=plan["locked"]["at"]))


def _set(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    facts = cmd.args["facts"]
    fixed = [k for k in facts if k in parse.LOCKED_ITEMS]
    if plan["locked"] and fixed:
        raise _locked_refusal(plan, f"`{fixed[0]}`")
    absent = [k for k, v in facts.items() if v is None and plan["facts"].get(k) is None]
    if absent:
        raise PlanError(_("`{key}=`: plan {plan} has no {key} set, so there is nothing to "
                          "unset (`{key}=VALUE` sets it)", key=absent[0], plan=cmd.plan))
    old = ctx.store.change_facts(cmd.plan, facts, user)
    plan = ctx.store.plan(cmd.plan)
    return changes.facts_set(plan, facts, old, views.open_items(plan))


def _block(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    return _put_block(ctx, plan, dict(cmd.args, plan=cmd.plan, user=user), user, channel)


def _block_correct(ctx, cmd, user, channel, today):
    """The given fields change; the block is then checked and estimated as a new one."""
    plan = _plan(ctx, cmd.plan, user, channel)
    old = ctx.store.block(cmd.plan, cmd.args["kind"])
    if old is None:
        raise PlanError(_("Plan {plan} has no {kind} block to correct; add it with "
                          "`/plan {plan} block {kind} runs=N trial=T12`",
                          plan=cmd.plan, kind=cmd.args["kind"]))
    block = parse.parse_block(parse.block_words(old, cmd.args["pairs"]))
    return _put_block(ctx, plan, dict(block, plan=cmd.plan, user=user), user, channel, old)


def _block_delete(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    kind = cmd.args["kind"]
    if kind in (plan["locked"] or {}):
        raise _locked_refusal(plan, _("The {kind} block", kind=kind))
    old = ctx.store.delete_block(cmd.plan, kind, user)
    if old is None:
        raise PlanError(_("Plan {plan} has no {kind} block to delete", plan=cmd.plan, kind=kind))
    actuals = [a for a in ctx.store.actuals(cmd.plan) if a["block"] == kind]
    tagged = [j for j in ctx.store.plan_jobs(cmd.plan) if j["block"] == kind]
    return changes.block_deleted(plan, old, len(actuals), len(tagged))


def _put_block(ctx, plan, block, user, channel, old=None):
    # A block reads its trials' reports: they may come from a private channel.
    homes = ([(f"S{block['sweep']}", j["channel"]) for j in ctx.store.sweep_jobs(
        block["sweep"])[:1]] if block["sweep"] else
        [(f"T{i}", j["channel"]) for i in block["trials"] if (j := ctx.store.job(i))])
    hidden = [name for name, home in homes if ctx.hides(home, user, channel)]
    if hidden:
        raise PlanHidden(_("{trials} belongs to another channel; a plan here is estimated "
                           "from this channel's trials (or an admin can use any).",
                           trials=", ".join(hidden)))
    existing = ctx.store.blocks(plan["name"])
    blocks = ([block if b["kind"] == block["kind"] else b for b in existing]
              if any(b["kind"] == block["kind"] for b in existing) else [*existing, block])
    # Estimated before it is stored: a block that cannot be estimated is not kept.
    block_est, trials = next((e, t) for b, e, t in service.estimates(ctx, plan, blocks)
                             if b["kind"] == block["kind"])
    warnings = views.block_warnings(plan, block_est, [t["report"] for t in trials])
    replaced = ctx.store.put_block(block, "correct" if old is not None else None)
    out = views.block_added(plan, block_est, warnings, replaced)
    if old is None:
        return out
    fields = changes.changed_fields({k: old.get(k) for k in BLOCK_FIELDS},
                                    {k: block.get(k) for k in BLOCK_FIELDS})
    head = (_("Corrected the {kind} block of *{plan}*: {fields}.", kind=block["kind"],
              plan=plan["name"], fields=fields) if fields else
            _("Corrected the {kind} block of *{plan}*: nothing changed.", kind=block["kind"],
              plan=plan["name"]))
    return views.reply(f"{head}\n{out['text']}")


BLOCK_FIELDS = ("runs", "configs", "gpus", "trials", "sweep", "predict", "handoff", "note")


def _show(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    return views.show(plan, ests, ctx.store.prices(), today,
                      ctx.store.plan_jobs(plan["name"]),
                      service.calibrations(ctx, plan, ests, user, channel))


def _export(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    price_list = ctx.store.prices()
    calib = service.calibrations(ctx, plan, ests, user, channel)
    rows = service.review_rows(ctx, plan, ests)
    held = [reviewview.held_text(r, e, c) if r.get("actual") is not None else None
            for r, (_block, e, _trials), c in zip(rows, ests, calib)]
    history, _total = ctx.store.history(plan["name"], _price_items(plan), limit=-1)
    whom = {"user": user, "response_url": cmd.args.get("response_url")}
    made = export.files(plan, ests, rows, price_list, today, calib, held, history,
                        ctx.store.actuals(plan["name"]))
    ctx.store.add_messages([dict(export.file(plan, channel, ext, content), **whom)
                            for ext, content in made])
    ctx.notify()
    names = ", ".join(f"`{plan['name']}-plan.{ext}`" for ext, _content in made)
    return views.reply(_("Exporting plan *{plan}*: {files} (the estimate, actuals, review, "
                         "lock, checklist, settings and prices used) are being uploaded to "
                         "this channel.", plan=plan["name"], files=names))


def _lock(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    if plan["locked"]:
        raise PlanError(_("Plan {plan} is locked since {at}; to lock it to its current "
                          "trials, `/plan {plan} unlock` first", plan=cmd.plan,
                          at=plan["locked"]["at"]))
    ests = service.estimates(ctx, plan)
    if not ests:
        raise PlanError(_("Plan {plan} has no blocks to lock; add one with "
                          "`/plan {plan} block baseline runs=N trial=T12`", plan=cmd.plan))
    locked = {b["kind"]: {"config": e["config"], "code": e["code"], "trials": e["trials"]}
              for b, e, _trials in ests}
    locked["at"] = today.isoformat()
    ctx.store.set_plan_lock(cmd.plan, locked, user)
    return views.locked(ctx.store.plan(cmd.plan))


def _unlock(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    if not plan["locked"]:
        raise PlanError(_("Plan {plan} is not locked", plan=cmd.plan))
    ctx.store.set_plan_lock(cmd.plan, None, user)
    return views.reply(_("Plan *{plan}* is unlocked: its input conditions and code "
                         "version may change again; `/plan NAME lock` fixes them anew.",
                         plan=cmd.plan))


def _advise(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    reports = [dict(t["report"], trial=t["trial"]) for _block, _est, ts in ests for t in ts]
    total = estimate.total([e for _block, e, _trials in ests])
    prep = sum(float(c["hours"]) for _block, e, _trials in ests for c in e["components"]
               if c["name"] == "prep" and not e.get("off_target"))  # as the total counts
    target = plan["facts"].get("gpu")
    missing = [f"{e['kind']}: {footing.missing_trial(plan['name'], e, target)}"
               for _block, e, _trials in ests if e.get("off_target")]
    fx = advice.facts_of(plan, reports, ctx.store.prices(), float(total["hours"]), prep,
                         missing=missing)
    return views.advice(plan, advice.advise(fx, today))


def _actual(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    kind = cmd.args["block"]
    if kind not in {b["kind"] for b in ctx.store.blocks(cmd.plan)}:
        raise PlanError(_("Plan {plan} has no {kind} block; add it first with "
                          "`/plan {plan} block {kind} runs=N trial=T12`", plan=cmd.plan,
                          kind=kind))
    if cmd.args.get("slurm"):
        return _slurm_actual(ctx, cmd, plan, user)
    if cmd.args.get("delete"):
        ids = cmd.args.get("ids")
        mine = {a["id"] for a in ctx.store.actuals(cmd.plan) if a["block"] == kind}
        unknown = [i for i in ids or [] if i not in mine]
        if unknown:
            raise PlanError(
                _("Plan {plan}'s {kind} block has no recorded actual #{id}; its actuals: "
                  "{actuals}", plan=cmd.plan, kind=kind, id=unknown[0],
                  actuals=", ".join(f"#{i}" for i in sorted(mine)) or _("none")))
        gone = ctx.store.delete_actuals(cmd.plan, kind, user, ids)
        if not gone:
            raise PlanError(_("Plan {plan} has no recorded {kind} actual to delete (a tagged "
                              "trial is a trial, not a recorded actual)", plan=cmd.plan,
                              kind=kind))
        return changes.actuals_deleted(plan, kind, gone, _actuals_now(ctx, plan, kind))
    if not cmd.args.get("confirm"):
        _plausible(ctx, plan, kind, cmd.args["hours"])
    try:
        replaced = ctx.store.add_actual(
            {"plan": cmd.plan, "block": kind, "hours": cmd.args["hours"],
             "parts": cmd.args["parts"], "runs": cmd.args["runs"], "note": cmd.args["note"],
             "user": user}, cmd.args.get("request"), replace=cmd.args.get("correct", False))
    except DuplicateRequest:
        return views.reply(_("Already recorded: this {kind} actual arrived twice (Slack "
                             "retried); it is counted once.", kind=kind))
    return changes.actual_recorded(plan, kind, cmd.args["hours"],
                                   replaced if cmd.args.get("correct") else None,
                                   _actuals_now(ctx, plan, kind))


IMPLAUSIBLE = 1000  # an actual this many times its estimate is asked to be confirmed


def _plausible(ctx, plan: dict, kind: str, hours: float) -> None:
    """A figure a thousand times the block's estimate is more likely a slip (minutes
    typed as hours, a digit too many) than a run: it is refused until confirmed."""
    try:
        est = next(e for b, e, _t in service.estimates(ctx, plan) if b["kind"] == kind)
    except (StopIteration, PlanError, estimate.EstimateError):
        return  # no estimate to compare with: nothing to judge it by
    if est["hours"] > 0 and hours > IMPLAUSIBLE * float(est["hours"]):
        raise PlanError(_("hours={hours} is {times}× the {kind} block's estimate of {estimate} "
                          "GPU-h; check the digits and the unit (GPU-hours, not minutes), or "
                          "add `confirm` if it really took that long: `/plan {plan} actual "
                          "{kind} hours={hours} confirm`", hours=f"{hours:g}",
                          times=f"{hours / float(est['hours']):,.0f}", kind=kind,
                          estimate=figures.gpu_hours(est["hours"]), plan=plan["name"]))


def _actuals_now(ctx, plan: dict, kind: str) -> str:
    rows = [a for a in ctx.store.actuals(plan["name"]) if a["block"] == kind]
    tagged = [j["trial"] for j in ctx.store.plan_jobs(plan["name"]) if j["block"] == kind]
    return changes.actuals_now(plan, kind, rows, review.latest_per_source(rows), tagged)


def _slurm_actual(ctx, cmd, plan, user):
    """The bot is not on the cluster: a Slurm worker runs sacct for it. The
    request is stored and leased like a trial; the actual is recorded, and
    posted in the plan's channel, when the worker's answer arrives."""
    slurm = workers.slurm(ctx.store)
    if not slurm:
        raise PlanError(_("No Slurm worker is registered, and the bot cannot read Slurm's "
                          "accounting itself: start one on the cluster's login node: "
                          "`trialbot-worker --server http://BOT-HOST:3000 --name hpc --executor "
                          "slurm --partition P` (docs/slurm.md), then ask again"))
    row = {"plan": plan["name"], "block": cmd.args["block"], "jobs": cmd.args["slurm"],
           "runs": cmd.args["runs"], "note": cmd.args["note"], "user": user,
           "channel": plan["channel"]}
    try:
        req = ctx.queue.submit_slurm_actual(row, cmd.args.get("request"))
    except DuplicateRequest as dup:
        return views.reply(_("Already received: Slurm accounting request A{id} is asked for; "
                             "its answer will be posted in the plan's channel.",
                             id=dup.jobs[0]))
    online = set(workers.online(ctx.store))
    return reviewview.slurm_asked(plan, req, [w["name"] for w in slurm],
                                [w["name"] for w in slurm if w["name"] in online])


def _review(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    return reviewview.review(plan, service.review_rows(ctx, plan, ests), ests,
                        service.calibrations(ctx, plan, ests, user, channel),
                        ctx.store.prices(), today)


def _settings(ctx, cmd, user, channel, today):
    """`/plan settings [lang=ko]`: the channel's language (anyone reads it; a
    change needs the right to change plans)."""
    if "lang" in cmd.args:
        refused = ctx.allows("run", user, channel, N_("change this channel's settings"))
        if refused:
            return views.reply(":lock: " + _("{refused} Nothing was changed.", refused=refused))
        ctx.store.set_channel_lang(channel, cmd.args["lang"], user)
    lang = ctx.store.channel_lang(channel)
    with i18n.using(lang or i18n.default()):  # the answer speaks the language now in effect
        return views.channel_settings(lang, i18n.current())


def _calibration(ctx, cmd, user, channel, today):
    """The team's record per scope, from the plans `user` may see here."""
    across: list[str] = []
    pairs = service.calibration_pairs(ctx, user, channel, across)
    groups = []
    for scope in sorted({p["scope"] for p in pairs}):
        mine = calibration.scoped(pairs, scope)
        groups.append((scope, calibration.record(mine), calibration.calibrate(mine, scope=scope)))
    return reviewview.calibration_record(groups, ctx.visible_plans(user, channel)[1], across)


def _price(ctx, cmd, user, channel, today):
    pid = ctx.store.add_price(dict(cmd.args, user=user))
    return changes.price_recorded(cmd.args, pid, today)


def _known_price(ctx, pid: int) -> dict:
    old = ctx.store.price(pid)
    if old is None:
        raise PlanError(_("There is no price P{id}; `/plan prices all` lists every recorded "
                          "price with its id", id=pid))
    return old


def _applies(ctx, old: dict) -> dict | None:
    return next((p for p in ctx.store.prices() if p["kind"] == old["kind"]
                 and p["item"].lower() == old["item"].lower()), None)


def _price_correct(ctx, cmd, user, channel, today):
    old = _known_price(ctx, cmd.args["id"])
    fields = priceparse.parse_price_correction(old, cmd.args["words"], today)
    if not fields:
        raise PlanError(_("P{id} has those values already; nothing to correct", id=old["id"]))
    ctx.store.correct_price(old["id"], fields, user)
    return changes.price_changed(old, {**old, **fields}, _applies(ctx, old), today)


def _price_delete(ctx, cmd, user, channel, today):
    old = _known_price(ctx, cmd.args["id"])
    ctx.store.delete_price(old["id"], user)
    return changes.price_changed(old, None, _applies(ctx, old), today)


def _prices(ctx, cmd, user, channel, today):
    every = cmd.args.get("all")
    return changes.price_list(ctx.store.all_prices() if every else ctx.store.prices(), today,
                              every)


def _history(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    rows, total = ctx.store.history(cmd.plan, _price_items(plan), changes.HISTORY_SHOWN)
    return changes.history(plan, rows, total)


def _price_items(plan: dict) -> tuple[str, ...]:
    """The prices a plan reads: its target GPU's and electricity."""
    return tuple(x for x in (plan["facts"].get("gpu"), "electricity") if x)


ACTIONS = {"help": _help, "list": _list, "new": _new, "set": _set, "block": _block,
           "show": _show, "export": _export, "lock": _lock, "unlock": _unlock,
           "advise": _advise, "actual": _actual, "review": _review, "price": _price,
           "prices": _prices, "calibration": _calibration, "history": _history,
           "block-correct": _block_correct, "block-delete": _block_delete,
           "price-correct": _price_correct, "price-delete": _price_delete,
           "settings": _settings}
