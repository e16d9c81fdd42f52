"""`/plan`: what the command does, for every adapter (Slack, console).
Parse → read the store → the pure core (planner, advice, prices) → a reply.
Bad input stores nothing."""
from __future__ import annotations

import datetime as dt
import logging

from bot.context import HiddenPlan, PlanUnreachable
from bot.plans import advice, calibration, estimate, export, parse, service, views
from bot.plans.parse import PlanError
from bot.store import DuplicateRequest
from bot.trials import workers
from bot.words import normalize

log = logging.getLogger("trialbot.plans")


def handle(ctx, text: str, user: str, channel: str, today: dt.date,
           now: dt.datetime | None = None, request: str | None = None,
           response_url: str | None = None) -> dict:
    """`request` is Slack's trigger_id: a retried `actual ... slurm=` asks once.
    `response_url` reaches the requester if the channel refuses what is posted."""
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
            return views.reply(f":lock: {refused} Nothing was changed.")
        if cmd.action in POSTS or (cmd.action == "actual" and cmd.args.get("slurm")):
            unpostable = ctx.channels.refusal(channel)  # its messages go to this channel
            if unpostable:
                return views.error(f"{unpostable}; then run the command again. Nothing "
                                      "was changed.")
        if cmd.action.startswith("digest"):  # bot/digest/command.py, through the context
            return ctx.digest_command(ctx, cmd, user, channel,
                                      now or dt.datetime.now(dt.timezone.utc), response_url)
        if cmd.action == "export":
            cmd.args["response_url"] = response_url
        return ACTIONS[cmd.action](ctx, cmd, user, channel, today)
    except PlanHidden as exc:
        return views.reply(f":lock: {exc}" + (" Nothing was changed." if need else ""))
    except (PlanError, estimate.EstimateError) as exc:
        return views.error(str(exc))
    except Exception:  # noqa: BLE001 - a bug must still get an answer, and a log line
        log.exception("/plan %r failed", text)
        return views.error("Something went wrong on our side answering this; it is in the "
                              "bot's log. Try again, or report it with the command you typed.")


POSTS = ("export", "digest-now", "digest-weekly")  # actions that post in the channel later

# What each /plan action needs (bot.access); reading is open to anyone (a plan
# in its own channel, see _plan).
NEEDS = {"price": ("admin", "record prices"),
         "digest-weekly": ("admin", "schedule the digest"),
         "digest-off": ("admin", "stop the digest"),
         **{a: ("run", "change plans") for a in ("new", "set", "block", "lock", "unlock",
                                                 "actual")},
         **{a: ("run", "post in this channel") for a in ("export", "digest-now")}}


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
            raise PlanError(f"A plan `{cmd.plan}` exists already in another channel; choose "
                            "another name")
        raise PlanError(f"A plan `{cmd.plan}` exists already; `/plan {cmd.plan} show` shows it, "
                        "or choose another name")
    return views.created(ctx.store.plan(cmd.plan))


def _set(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    facts = cmd.args["facts"]
    fixed = [k for k in facts if k in parse.LOCKED_ITEMS]
    if plan["locked"] and fixed:
        raise PlanError(f"`{fixed[0]}` is fixed while plan {cmd.plan} is locked; "
                        f"`/plan {cmd.plan} unlock` first (its estimates then need re-checking)")
    ctx.store.set_plan_facts(cmd.plan, {**plan["facts"], **facts})
    return views.facts_set(ctx.store.plan(cmd.plan), facts)


def _block(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    block = dict(cmd.args, plan=cmd.plan, user=user)
    # A block reads its trials' reports: they may come from a private channel.
    homes = ([(f"S{block['sweep']}", j["channel"]) for j in ctx.store.sweep_jobs(
        block["sweep"])[:1]] if block["sweep"] else
        [(f"T{i}", j["channel"]) for i in block["trials"] if (j := ctx.store.job(i))])
    hidden = [name for name, home in homes if ctx.hides(home, user, channel)]
    if hidden:
        raise PlanHidden(f"{', '.join(hidden)} belongs to another channel; a plan here is "
                         "estimated from this channel's trials (or an admin can use any).")
    existing = ctx.store.blocks(cmd.plan)
    blocks = ([block if b["kind"] == block["kind"] else b for b in existing]
              if any(b["kind"] == block["kind"] for b in existing) else [*existing, block])
    # Estimated before it is stored: a block that cannot be estimated is not kept.
    block_est, trials = next((e, t) for b, e, t in service.estimates(ctx, plan, blocks)
                             if b["kind"] == block["kind"])
    warnings = views.block_warnings(plan, block_est, [t["report"] for t in trials])
    replaced = ctx.store.put_block(block)
    return views.block_added(plan, block_est, warnings, replaced)


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
    whom = {"user": user, "response_url": cmd.args.get("response_url")}
    ctx.store.add_messages([
        dict(export.file(plan, channel, "csv", export.csv_text(plan, ests, price_list,
                                                               today, calib)), **whom),
        dict(export.file(plan, channel, "md", export.markdown(plan, ests, price_list,
                                                              today, calib)), **whom)])
    ctx.notify()
    return views.reply(f"Exporting plan *{plan['name']}*: `{plan['name']}-plan.csv` and "
                          f"`{plan['name']}-plan.md` are being uploaded to this channel.")


def _lock(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    if plan["locked"]:
        raise PlanError(f"Plan {cmd.plan} is locked since {plan['locked']['at']}; to lock it to "
                        f"its current trials, `/plan {cmd.plan} unlock` first")
    ests = service.estimates(ctx, plan)
    if not ests:
        raise PlanError(f"Plan {cmd.plan} has no blocks to lock; add one with "
                        f"`/plan {cmd.plan} block baseline runs=N trial=T12`")
    locked = {b["kind"]: {"config": e["config"], "code": e["code"], "trials": e["trials"]}
              for b, e, _ in ests}
    locked["at"] = today.isoformat()
    ctx.store.set_plan_lock(cmd.plan, locked)
    return views.locked(ctx.store.plan(cmd.plan))


def _unlock(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    if not plan["locked"]:
        raise PlanError(f"Plan {cmd.plan} is not locked")
    ctx.store.set_plan_lock(cmd.plan, None)
    return views.reply(f"Plan *{cmd.plan}* is unlocked: its input conditions and code "
                          "version may change again; `/plan NAME lock` fixes them anew.")


def _advise(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    reports = [dict(t["report"], trial=t["trial"]) for _, _, ts in ests for t in ts]
    total = estimate.total([e for _, e, _ in ests])
    prep = sum(float(c["hours"]) for _, e, _ in ests for c in e["components"]
               if c["name"] == "prep")
    fx = advice.facts_of(plan, reports, ctx.store.prices(), float(total["hours"]), prep)
    return views.advice(plan, advice.advise(fx, today))


def _actual(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    kind = cmd.args["block"]
    if kind not in {b["kind"] for b in ctx.store.blocks(cmd.plan)}:
        raise PlanError(f"Plan {cmd.plan} has no {kind} block; add it first with "
                        f"`/plan {cmd.plan} block {kind} runs=N trial=T12`")
    if cmd.args.get("slurm"):
        return _slurm_actual(ctx, cmd, plan, user)
    if cmd.args.get("delete"):
        gone = ctx.store.delete_actuals(cmd.plan, kind)
        if not gone:
            raise PlanError(f"Plan {cmd.plan} has no recorded {kind} actual to delete (a "
                            "tagged trial is a trial, not a recorded actual)")
        return views.reply(f"Deleted {gone} recorded {kind} actual(s) of *{plan['name']}*: "
                           "the review and the calibration no longer count them.")
    try:
        replaced = ctx.store.add_actual(
            {"plan": cmd.plan, "block": kind, "hours": cmd.args["hours"],
             "parts": cmd.args["parts"], "runs": cmd.args["runs"], "note": cmd.args["note"],
             "user": user}, cmd.args.get("request"), replace=cmd.args.get("correct", False))
    except DuplicateRequest:
        return views.reply(f"Already recorded: this {kind} actual arrived twice (Slack "
                              "retried); it is counted once.")
    fixed = f", replacing {replaced} earlier one(s)" if cmd.args.get("correct") else ""
    return views.reply(f"Recorded for *{plan['name']}* {kind}: {cmd.args['hours']:g} GPU-h "
                       f"actual{fixed}. `/plan {plan['name']} review` compares it with the "
                       "estimate.")


SLURM_WORKER_HELP = ("start one on the cluster's login node: `trialbot-worker --server "
                     "http://BOT-HOST:3000 --name hpc --executor slurm --partition P` "
                     "(docs/slurm.md)")


def _slurm_actual(ctx, cmd, plan, user):
    """The bot is not on the cluster: a Slurm worker runs sacct for it. The
    request is stored and leased like a trial; the actual is recorded, and
    posted in the plan's channel, when the worker's answer arrives."""
    slurm = workers.slurm(ctx.store)
    if not slurm:
        raise PlanError("No Slurm worker is registered, and the bot cannot read Slurm's "
                        f"accounting itself: {SLURM_WORKER_HELP}, then ask again")
    row = {"plan": plan["name"], "block": cmd.args["block"], "jobs": cmd.args["slurm"],
           "runs": cmd.args["runs"], "note": cmd.args["note"], "user": user,
           "channel": plan["channel"]}
    try:
        req = ctx.queue.submit_slurm_actual(row, cmd.args.get("request"))
    except DuplicateRequest as dup:
        return views.reply(f"Already received: Slurm accounting request A{dup.jobs[0]} is "
                              "asked for; its answer will be posted in the plan's channel.")
    online = set(workers.online(ctx.store))
    return views.slurm_asked(plan, req, [w["name"] for w in slurm],
                                [w["name"] for w in slurm if w["name"] in online])


def _review(ctx, cmd, user, channel, today):
    plan = _plan(ctx, cmd.plan, user, channel)
    ests = service.estimates(ctx, plan)
    return views.review(plan, service.review_rows(ctx, plan, ests), ests,
                        service.calibrations(ctx, plan, ests, user, channel))


def _calibration(ctx, cmd, user, channel, today):
    """The team's record per scope, from the plans `user` may see here."""
    pairs = service.calibration_pairs(ctx, user, channel)
    groups = []
    for scope in sorted({p["scope"] for p in pairs}):
        mine = calibration.scoped(pairs, scope)
        groups.append((scope, calibration.record(mine), calibration.calibrate(mine, scope=scope)))
    return views.calibration_record(groups, ctx.visible_plans(user, channel)[1])


def _price(ctx, cmd, user, channel, today):
    ctx.store.add_price(dict(cmd.args, user=user))
    return views.price_recorded(cmd.args, today)


def _prices(ctx, cmd, user, channel, today):
    return views.price_list(ctx.store.prices(), today)


ACTIONS = {"help": _help, "list": _list, "new": _new, "set": _set, "block": _block,
           "show": _show, "export": _export, "lock": _lock, "unlock": _unlock,
           "advise": _advise, "actual": _actual, "review": _review, "price": _price,
           "prices": _prices, "calibration": _calibration}
