"""`/plan`: what the command does, for every adapter (Slack, console).
Parse → read the store → the pure core (planner, advice, prices) → a reply.
Bad input stores nothing. TABLE lists every action with its parser, its
handler, its lines in `/plan help` and the right it needs; bot/plans/entry.py
runs a command through it."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from bot.context import Context
from bot.plans import (
    actualparse,
    actuals,
    advice,
    calibration,
    changes,
    checkparse,
    checks,
    checkview,
    entry,
    estimate,
    export,
    fitson,
    footing,
    parse,
    priceparse,
    prices,
    reviewview,
    service,
    views,
)
from bot.plans.entry import Asked, Entry, PlanHidden, plan_of, stored_plan
from bot.plans.grammar import PlanCommand, PlanError
from bot.states import Json
from bot.words import normalize
from worker import i18n
from worker.i18n import N_, _


def handle(ctx: Context, text: str, user: str, channel: str, today: dt.date,
           now: dt.datetime | None = None, request: str | None = None,
           response_url: str | None = None, table: Sequence[Entry] | None = None) -> Json:
    """`/plan` through `table` (this module's TABLE unless given: bot/commands.py
    gives it with the digest's entries). `request` is Slack's trigger_id: a
    retried `actual ... slurm=` asks once. `response_url` reaches the requester
    if the channel refuses what is posted. The answer speaks the channel's
    language (`/plan settings lang=ko`)."""
    asked = Asked(user, channel, today, now or dt.datetime.now(dt.timezone.utc), request,
                  response_url, TABLE if table is None else table)
    with i18n.using(ctx.store.channel_lang(channel)):
        # once, here: every parser and every echo sees the plain words
        return entry.run(ctx, normalize(text), asked)


def parse_plan(text: str, today: dt.date, table: Sequence[Entry] | None = None
               ) -> PlanCommand:
    """`/plan`'s text as a command, through the table (tests read it)."""
    return entry.route(normalize(text), today, TABLE if table is None else table)[1]


def _help(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    return entry.help_reply(asked.table, cmd.args.get("topic", ""),
                            kinds=", ".join(parse.BLOCK_KINDS))


def _list(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    return views.plan_list(*ctx.visible_plans(asked.user, asked.channel))


def _new(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    assert cmd.plan is not None  # the table routes a plan's actions only with its name
    if not ctx.store.add_plan(cmd.plan, asked.channel, asked.user, cmd.args["facts"]):
        if stored_plan(ctx, cmd.plan)["channel"] != asked.channel:  # names are shared by all
            raise PlanError(_("A plan `{plan}` exists already in another channel; choose "
                              "another name", plan=cmd.plan))
        raise PlanError(_("A plan `{plan}` exists already; `/plan {plan} show` shows it, "
                          "or choose another name", plan=cmd.plan))
    return views.created(stored_plan(ctx, cmd.plan))


def _locked_refusal(plan: Json, what: str) -> PlanError:
    return PlanError(_("{what} is fixed while plan {plan} is locked (since {at}); `/plan {plan} "
                       "unlock` first (its estimates then need re-checking)",
                       what=what, plan=plan["name"], at=plan["locked"]["at"]))


def _set(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    assert cmd.plan is not None  # the table routes a plan's actions only with its name
    plan = plan_of(ctx, cmd.plan, asked)
    facts = cmd.args["facts"]
    fixed = [k for k in facts if k in parse.LOCKED_ITEMS]
    if plan["locked"] and fixed:
        raise _locked_refusal(plan, f"`{fixed[0]}`")
    absent = [k for k, v in facts.items() if v is None and plan["facts"].get(k) is None]
    if absent:
        raise PlanError(_("`{key}=`: plan {plan} has no {key} set, so there is nothing to "
                          "unset (`{key}=VALUE` sets it)", key=absent[0], plan=cmd.plan))
    old = ctx.store.change_facts(cmd.plan, facts, asked.user)
    plan = stored_plan(ctx, cmd.plan)
    return changes.facts_set(plan, facts, old, views.open_items(plan))


def _block(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    return _put_block(ctx, plan, dict(cmd.args, plan=cmd.plan, user=asked.user), asked.user,
                      asked.channel)


def _block_correct(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    """The given fields change; the block is then checked and estimated as a new one."""
    plan = plan_of(ctx, cmd.plan, asked)
    old = ctx.store.block(plan["name"], cmd.args["kind"])
    if old is None:
        raise PlanError(_("Plan {plan} has no {kind} block to correct; add it with "
                          "`/plan {plan} block {kind} runs=N trial=T12`",
                          plan=cmd.plan, kind=cmd.args["kind"]))
    block = parse.parse_block(parse.block_words(old, cmd.args["pairs"]))
    return _put_block(ctx, plan, dict(block, plan=cmd.plan, user=asked.user), asked.user,
                      asked.channel, old)


def _block_delete(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    assert cmd.plan is not None  # the table routes a plan's actions only with its name
    plan = plan_of(ctx, cmd.plan, asked)
    kind = cmd.args["kind"]
    if kind in (plan["locked"] or {}):
        raise _locked_refusal(plan, _("The {kind} block", kind=kind))
    old = ctx.store.delete_block(cmd.plan, kind, asked.user)
    if old is None:
        raise PlanError(_("Plan {plan} has no {kind} block to delete", plan=cmd.plan, kind=kind))
    actuals = [a for a in ctx.store.actuals(cmd.plan) if a["block"] == kind]
    tagged = [j for j in ctx.store.plan_jobs(cmd.plan) if j["block"] == kind]
    return changes.block_deleted(plan, old, len(actuals), len(tagged))


def _put_block(ctx: Context, plan: Json, block: Json, user: str, channel: str,
               old: Json | None = None) -> Json:
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


def _show(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    ests = service.estimates(ctx, plan)
    checked = checkview.show_line(plan, ctx.store.latest_check(plan["name"]))
    return views.show(plan, ests, ctx.store.prices(), asked.today,
                      ctx.store.plan_jobs(plan["name"]),
                      service.calibrations(ctx, plan, ests, asked.user, asked.channel),
                      "\n".join(p for p in (fitson.section(plan, ests), checked) if p))


def _export(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    ests = service.estimates(ctx, plan)
    price_list = ctx.store.prices()
    calib = service.calibrations(ctx, plan, ests, asked.user, asked.channel)
    rows = service.review_rows(ctx, plan, ests)
    held = [reviewview.held_text(r, e, c) if r.get("actual") is not None else None
            for r, (_block, e, _trials), c in zip(rows, ests, calib)]
    history, _total = ctx.store.history(plan["name"], _price_items(plan), limit=-1)
    whom = {"user": asked.user, "response_url": asked.response_url}
    made = export.files(plan, ests, rows, price_list, asked.today, calib, held, history,
                        ctx.store.actuals(plan["name"]))
    ctx.store.add_messages([dict(export.file(plan, asked.channel, ext, content), **whom)
                            for ext, content in made])
    ctx.notify()
    names = ", ".join(f"`{plan['name']}-plan.{ext}`" for ext, _content in made)
    return views.reply(_("Exporting plan *{plan}*: {files} (the estimate, actuals, review, "
                         "lock, checklist, settings and prices used) are being uploaded to "
                         "this channel.", plan=plan["name"], files=names))


def _lock(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    assert cmd.plan is not None  # the table routes a plan's actions only with its name
    plan = plan_of(ctx, cmd.plan, asked)
    if plan["locked"]:
        raise PlanError(_("Plan {plan} is locked since {at}; to lock it to its current "
                          "trials, `/plan {plan} unlock` first", plan=cmd.plan,
                          at=plan["locked"]["at"]))
    ests = service.estimates(ctx, plan)
    if not ests:
        raise PlanError(_("Plan {plan} has no blocks to lock; add one with "
                          "`/plan {plan} block baseline runs=N trial=T12`", plan=cmd.plan))
    locked: dict[str, Any] = {
        b["kind"]: {"config": e["config"], "code": e["code"], "trials": e["trials"]}
        for b, e, _trials in ests}
    locked["at"] = asked.today.isoformat()
    ctx.store.set_plan_lock(cmd.plan, locked, asked.user)
    return views.locked(stored_plan(ctx, cmd.plan))


def _unlock(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    if not plan["locked"]:
        raise PlanError(_("Plan {plan} is not locked", plan=cmd.plan))
    ctx.store.set_plan_lock(plan["name"], None, asked.user)
    return views.reply(_("Plan *{plan}* is unlocked: its input conditions and code "
                         "version may change again; `/plan NAME lock` fixes them anew.",
                         plan=cmd.plan))


def _advise(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    ests = service.estimates(ctx, plan)
    reports = [dict(t["report"], trial=t["trial"]) for _block, _est, ts in ests for t in ts]
    total = estimate.total([e for _block, e, _trials in ests])
    prep = sum(float(c["hours"]) for _block, e, _trials in ests for c in e["components"]
               if c["name"] == "prep" and not e.get("off_target"))  # as the total counts
    target = plan["facts"].get("gpu")
    missing = [f"{e['kind']}: {footing.missing_trial(plan['name'], e, target)}"
               for _block, e, _trials in ests if e.get("off_target")]
    fx = advice.facts_of(plan, reports, ctx.store.prices(), float(total["hours"]), prep,
                         missing=missing, check=checkview.advice_facts(
                             plan, ctx.store.latest_check(plan["name"])))
    return views.advice(plan, advice.advise(fx, asked.today))


def _review(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    ests = service.estimates(ctx, plan)
    return reviewview.review(plan, service.review_rows(ctx, plan, ests), ests,
                        service.calibrations(ctx, plan, ests, asked.user, asked.channel),
                        ctx.store.prices(), asked.today)


def _settings(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    """`/plan settings [lang=ko] [currency=KRW]`: the channel's language and
    currency (anyone reads them; a change needs the right to change plans)."""
    if cmd.args:
        refused = ctx.allows("run", asked.user, asked.channel,
                             N_("change this channel's settings"))
        if refused:
            return views.reply(":lock: " + _("{refused} Nothing was changed.", refused=refused))
    if "lang" in cmd.args:
        ctx.store.set_channel_lang(asked.channel, cmd.args["lang"], asked.user)
    if "currency" in cmd.args:
        ctx.store.set_channel_currency(asked.channel, cmd.args["currency"], asked.user)
    lang = ctx.store.channel_lang(asked.channel)
    with i18n.using(lang or i18n.default()):  # the answer speaks the language now in effect
        return views.channel_settings(lang, i18n.current(),
                                      ctx.store.channel_currency(asked.channel))


def _calibration(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    """The team's record per scope, from the plans `user` may see here."""
    across: list[str] = []
    pairs = service.calibration_pairs(ctx, asked.user, asked.channel, across)
    groups = []
    for scope in sorted({p["scope"] for p in pairs}):
        mine = calibration.scoped(pairs, scope)
        groups.append((scope, calibration.record(mine), calibration.calibrate(mine, scope=scope)))
    return reviewview.calibration_record(groups, ctx.visible_plans(asked.user, asked.channel)[1],
                                         across)


def _price(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    price = {k: v for k, v in cmd.args.items() if k != "confirm"}
    assumed = price["kind"] != "power" and not price["currency"]
    if assumed:  # none written: the channel's, said in the reply
        price["currency"] = ctx.store.channel_currency(asked.channel) or ""
    current = ctx.store.prices()
    doubt = prices.resale_above_buy(price, current) or (
        None if cmd.args.get("confirm") else prices.needs_confirm(price, current))
    if doubt:  # an assumed currency is part of why: say it
        raise PlanError(doubt + (" " + changes.read_as(price["currency"])
                                 if assumed and price["currency"] else ""))
    pid = ctx.store.add_price(dict(price, user=asked.user))
    return changes.price_recorded(price, pid, asked.today, assumed)


def _known_price(ctx: Context, pid: int) -> Json:
    old = ctx.store.price(pid)
    if old is None:
        raise PlanError(_("There is no price P{id}; `/plan prices all` lists every recorded "
                          "price with its id", id=pid))
    return old


def _applies(ctx: Context, old: Json) -> Json | None:
    return next((p for p in ctx.store.prices() if p["kind"] == old["kind"]
                 and p["item"].lower() == old["item"].lower()), None)


def _price_correct(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    old = _known_price(ctx, cmd.args["id"])
    fields = priceparse.parse_price_correction(old, cmd.args["words"], asked.today)
    if not fields:
        raise PlanError(_("P{id} has those values already; nothing to correct", id=old["id"]))
    new = {**old, **fields}
    confirm = any(w.lower() == "confirm" for w in cmd.args["words"])
    doubt = prices.resale_above_buy(new, ctx.store.prices()) or (
        None if confirm else prices.needs_confirm(new, [old]))
    if doubt:
        raise PlanError(doubt)
    ctx.store.correct_price(old["id"], fields, asked.user)
    return changes.price_changed(old, {**old, **fields}, _applies(ctx, old), asked.today)


def _price_delete(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    old = _known_price(ctx, cmd.args["id"])
    ctx.store.delete_price(old["id"], asked.user)
    return changes.price_changed(old, None, _applies(ctx, old), asked.today)


def _prices(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    every = bool(cmd.args.get("all"))
    return changes.price_list(ctx.store.all_prices() if every else ctx.store.prices(), asked.today,
                              every)


def _history(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    rows, total = ctx.store.history(plan["name"], _price_items(plan), changes.HISTORY_SHOWN)
    return changes.history(plan, rows, total)


def _price_items(plan: Json) -> tuple[str, ...]:
    """The prices a plan reads: its target GPU's and electricity."""
    return tuple(x for x in (plan["facts"].get("gpu"), "electricity") if x)


CHANGE = ("run", N_("change plans"))
POST = ("run", N_("post in this channel"))

TABLE: tuple[Entry, ...] = (
    Entry("help", "help", parse.parse_help, _help),
    Entry("new", "new", parse.parse_new, _new, needs=CHANGE, help=(
        "• `/plan new NAME` · `/plan list` · `/plan NAME show` · `/plan NAME export`",)),
    Entry("list", "list", parse.parse_alone, _list),
    Entry("show", "show", parse.parse_alone, _show, of_plan=True),
    Entry("export", "export", parse.parse_alone, _export, needs=POST, posts=True,
          of_plan=True),
    Entry("set", "set", parse.parse_set, _set, needs=CHANGE, of_plan=True, help=(
        N_("• `/plan NAME set key=value ...` fills the checklist and the planning facts"),)),
    Entry("block", "block", parse.parse_block_words, _block, needs=CHANGE, of_plan=True, help=(
        N_("• `/plan NAME block KIND runs=N [configs=M] [gpus=G] trial=T12[,T13] "
           "[note=\"open variable\"] [handoff=H]`, KIND one of {kinds}"),
        N_("• `/plan NAME block scale runs=N sweep=S12 batch=32 [prompt=..] [gen=..]`: "
           "estimated from a sweep's fit (a recipe sweep: the parameter it varied, "
           "`sweep=S12 max_tokens=64`; a depth sweep: `sweep=S12 layers=32`; it and a "
           "partial-depth trial are marked until a full-depth trial replaces them)"))),
    Entry("lock", "lock", parse.parse_alone, _lock, needs=CHANGE, of_plan=True, help=(
        "• `/plan NAME lock` / `unlock` · `/plan NAME advise` · "
        "`/plan NAME actual KIND hours=H [prep=H data=H retries=H idle=H runs=N]` · "
        "`/plan NAME review`",)),
    Entry("unlock", "unlock", parse.parse_alone, _unlock, needs=CHANGE, of_plan=True),
    Entry("advise", "advise", parse.parse_alone, _advise, of_plan=True),
    Entry("review", "review", parse.parse_alone, _review, of_plan=True),
    Entry("check", "check", checkparse.parse_check, checks.handle, needs=CHANGE, posts=True,
          of_plan=True, help=(N_(
              "• `/plan NAME check [repo=URL_OR_PATH] [commit=SHA]`: a worker fetches the "
              "repository (the checklist's `repo` unless given) and reads it without running "
              "it: will it run on each GPU kind, a Mac and a CPU, and why; it fills "
              "`framework` and `needs_cuda` when they are empty"),)),
    Entry("actual", "actual", actualparse.parse_actual_words, actuals.handle, needs=CHANGE,
          of_plan=True,
          help=(N_("• `/plan NAME actual KIND slurm=JOBID[,JOBID...] [runs=N] [note=...]`: the "
                   "actual from Slurm's accounting, read by a Slurm worker with sacct: GPU-h = "
                   "Σ Elapsed × allocated GPUs (jobs that did not complete count as retries; "
                   "no GPU allocated: node-hours), with MaxRSS and GPU TRES usage in its note"),
                N_("• `/plan NAME actual KIND correct [#N] hours=H|runs=N|note=...` changes "
                   "only the fields given of the block's actual (#N when it has several) · "
                   "`/plan NAME actual KIND delete [#N]` removes them (or actual #N)"),
                N_("• Tag a trial as an actual: `/trial llm-infer ... plan=NAME block=KIND` (on "
                   "the plan's target GPU; `gpu=any` runs it anywhere, kept apart as "
                   "off-target)"))),
    Entry("block-correct", "block", parse.parse_block_words, _block_correct, needs=CHANGE,
          of_plan=True, help=(N_(
              "• Corrections: `/plan NAME set key=` unsets an item · `/plan NAME block KIND "
              "correct runs=30 ...` · `/plan NAME block KIND delete` · `/plan price correct P7 "
              "2.39/h|source=...|date=...` · `/plan price delete P7` · `/plan prices all`; "
              "`/plan NAME history` shows every change (who, when, old and new value)"),)),
    Entry("block-delete", "block", parse.parse_block_words, _block_delete, needs=CHANGE,
          of_plan=True),
    Entry("history", "history", parse.parse_alone, _history, of_plan=True),
    Entry("calibration", "calibration", parse.parse_alone, _calibration, help=(N_(
        "• `/plan calibration`: how past intervals held their actuals, per GPU kind and "
        "workload; once 9 blocks of one have actuals, `show` adds their calibrated 90% "
        "interval and `review` says whether each actual fell inside"),)),
    Entry("settings", "settings", parse.parse_settings_words, _settings, help=(N_(
        "• `/plan settings lang=ko` writes this channel's messages in Korean "
        "(`lang=en` in English, `lang=` the bot's default); `currency=KRW` reads a price "
        "typed here without a currency in KRW · `/plan settings` shows them"),)),
    Entry("price", "price", parse.parse_price_words, _price,
          needs=("admin", N_("record prices")), help=(N_(
              "• `/plan price H100 2.49/h source=URL date=YYYY-MM-DD` (also `buy=`, `resale=`, "
              "`power=0.7kW`; `/plan price electricity 0.12/kWh ...`) · `/plan prices`"),)),
    Entry("price-correct", "price", parse.parse_price_words, _price_correct,
          needs=("admin", N_("correct prices"))),
    Entry("price-delete", "price", parse.parse_price_words, _price_delete,
          needs=("admin", N_("delete prices"))),
    Entry("prices", "prices", parse.parse_prices, _prices),
)
