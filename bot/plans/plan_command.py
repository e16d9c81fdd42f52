"""`/plan`: what the command does, for every adapter (Slack, console).
Parse → read the store → the pure core (planner, advice, prices) → a reply.
Bad input stores nothing."""
from __future__ import annotations

import datetime as dt
import logging
import math

import numpy as np

from bot.plans.plancmd import PlanError
from bot.trials.queue import JobQueue
from bot.store import DuplicateRequest
from bot.fits import depth
from bot.plans import plancmd, planner, planview, advice
from bot.fits.sweep import fit_sweep, predict_seconds

log = logging.getLogger("trialbot.plans")


def handle(queue: JobQueue, text: str, user: str, channel: str, today: dt.date,
           now: dt.datetime | None = None, request: str | None = None,
           response_url: str | None = None) -> dict:
    """`request` is Slack's trigger_id: a retried `actual ... slurm=` asks once.
    `response_url` reaches the requester if the channel refuses what is posted."""
    need = None
    try:
        cmd = plancmd.parse(text, today)
        if cmd.action == "actual":
            cmd.args["request"] = request
        need, what = NEEDS.get(cmd.action, (None, None))
        # (a plan is reached only in its own channel or by an admin, see _plan, so
        # this channel's right is the plan's too: an admin has it everywhere)
        refused = need and queue.allows(need, user, channel, what)
        if refused:
            return planview.reply(f":lock: {refused} Nothing was changed.")
        if cmd.action in POSTS or (cmd.action == "actual" and cmd.args.get("slurm")):
            unpostable = queue.channels.refusal(channel)  # its messages go to this channel
            if unpostable:
                return planview.error(f"{unpostable}; then run the command again. Nothing "
                                      "was changed.")
        if cmd.action.startswith("digest"):
            from bot.digest import schedule  # it reads plans through this module
            return schedule.command(queue, cmd, user, channel,
                                    now or dt.datetime.now(dt.timezone.utc), response_url)
        if cmd.action == "export":
            cmd.args["response_url"] = response_url
        return ACTIONS[cmd.action](queue, cmd, user, channel, today)
    except PlanHidden as exc:
        return planview.reply(f":lock: {exc}" + (" Nothing was changed." if need else ""))
    except (PlanError, planner.EstimateError) as exc:
        return planview.error(str(exc))
    except Exception:  # noqa: BLE001 - a bug must still get an answer, and a log line
        log.exception("/plan %r failed", text)
        return planview.error("Something went wrong on our side answering this; it is in the "
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


def take_tags(queue: JobQueue, words: list[str], user: str, channel: str
              ) -> tuple[list[str], dict | None]:
    """`plan=NAME block=KIND` on `/trial`: taken out of the words (they are not
    workload parameters) and checked, so a trial is never tagged to nothing
    (nor to a plan `user` cannot reach from `channel`)."""
    tagged = [w.partition("=") for w in words if w.startswith(("plan=", "block="))]
    tags = {key: value for key, _, value in tagged}
    if len(tags) < len(tagged):
        twice = " ".join(f"`{k}={v}`" for k, _, v in tagged)
        raise PlanError(f"{twice}: plan= or block= is given twice; tag a trial to one plan "
                        "and block")
    rest = [w for w in words if not w.startswith(("plan=", "block="))]
    if not tags:
        return rest, None
    if set(tags) != {"plan", "block"}:
        given = " ".join(f"`{k}={v}`" for k, v in tags.items())
        raise PlanError(f"{given}: tag a trial with both plan=NAME and block=KIND, e.g. "
                        "`plan=adkv block=baseline`")
    plan = _plan(queue, plancmd.plan_name(tags["plan"]), user, channel)
    kinds = [b["kind"] for b in queue.store.blocks(plan["name"])]
    if tags["block"] not in kinds:
        raise PlanError(f"`block={tags['block']}`: plan {plan['name']} has no such block; its "
                        "blocks: " + (", ".join(kinds) or "none yet"))
    return rest, tags


class PlanHidden(PlanError):
    """The plan lives in another channel (perhaps a private one)."""


def visible_plans(queue: JobQueue, user: str, channel: str) -> tuple[list[dict], bool]:
    """The plans `user` may reach from `channel`: its own, or every plan for an
    admin (then True)."""
    if queue.allows("admin", user, channel) is None:
        return queue.store.plans(), True
    return queue.store.plans(channel), False


def _plan(queue: JobQueue, name: str, user: str, channel: str) -> dict:
    """The plan, if `user` may reach it from `channel` (as `/trial status`: a
    plan may live in a private channel); its name is all a refusal tells."""
    plan = queue.store.plan(name)
    if plan is None:
        seen, admin = visible_plans(queue, user, channel)
        known = ", ".join(p["name"] for p in seen) or "none yet"
        raise PlanError(f"There is no plan `{name}`. Plans{'' if admin else ' here'}: {known}. "
                        f"Start one with `/plan new {name}`")
    if queue.hides(plan["channel"], user, channel):
        raise PlanHidden(f"Plan `{name}` belongs to another channel; ask there (or an admin "
                         "can ask anywhere).")
    return plan


def _help(queue, cmd, user, channel, today):
    return planview.help_text()


def _list(queue, cmd, user, channel, today):
    return planview.plan_list(*visible_plans(queue, user, channel))


def _new(queue, cmd, user, channel, today):
    if not queue.store.add_plan(cmd.plan, channel, user, cmd.args["facts"]):
        if queue.store.plan(cmd.plan)["channel"] != channel:  # names are shared by all
            raise PlanError(f"A plan `{cmd.plan}` exists already in another channel; choose "
                            "another name")
        raise PlanError(f"A plan `{cmd.plan}` exists already; `/plan {cmd.plan} show` shows it, "
                        "or choose another name")
    return planview.created(queue.store.plan(cmd.plan))


def _set(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    facts = cmd.args["facts"]
    fixed = [k for k in facts if k in plancmd.LOCKED_ITEMS]
    if plan["locked"] and fixed:
        raise PlanError(f"`{fixed[0]}` is fixed while plan {cmd.plan} is locked; "
                        f"`/plan {cmd.plan} unlock` first (its estimates then need re-checking)")
    queue.store.set_plan_facts(cmd.plan, {**plan["facts"], **facts})
    return planview.facts_set(queue.store.plan(cmd.plan), facts)


def _trials(queue: JobQueue, ids: list[int]) -> list[dict]:
    jobs = []
    for i in ids:
        job = queue.store.job(i)
        if job is None:
            raise PlanError(f"There is no trial T{i}; `/trial list` shows recent ones")
        jobs.append(job)
    planner.check_trials(jobs)
    return jobs


def _sweep_prediction(queue: JobQueue, block: dict) -> tuple[list[dict], dict]:
    jobs = queue.store.sweep_jobs(block["sweep"])
    if not jobs:
        raise PlanError(f"There is no sweep S{block['sweep']}; `/trial sweep ...` starts one")
    waiting = [j["trial"] for j in jobs if j["status"] in ("queued", "running")]
    if waiting:
        raise PlanError(f"Sweep S{block['sweep']} is still running ({', '.join(waiting)}); add "
                        "the block when it has reported")
    ok = [j for j in jobs if j["report"] and j["report"]["status"] == "ok"]
    if len(ok) < 2:
        raise PlanError(f"Sweep S{block['sweep']} has {len(ok)} successful trial(s); a fit needs "
                        "at least 2")
    params = {**ok[0]["report"]["params"], **block["predict"]}
    try:
        fit = fit_sweep([j["report"] for j in ok])
        if fit.get("kind") == "depth":
            _check_depth_block(block, params)
        seconds, se, dof = predict_seconds(fit, params)
    except PlanError:
        raise
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        raise PlanError(f"Sweep S{block['sweep']} cannot predict this config: {exc}") from None
    shown = " ".join(f"{k}={v}" for k, v in block["predict"].items())
    held = [k for k in ("batch", "prompt", "gen") if k in params and k not in block["predict"]]
    unit = "per run phase" if ok[0]["report"].get("recipe") else "per request"
    source = (f"{unit}, predicted for {shown}"
              + (f" (at the sweep's {', '.join(f'{k}={params[k]}' for k in held)})"
                 if held else "")
              + f" by the time fit of sweep S{block['sweep']} ({len(ok)} trials; a model "
              "estimate, not measured at this config)")
    out = {"seconds": seconds, "se": se, "dof": dof, "sd": fit["time"]["residual_sd"],
           "source": source, "partial": None}
    if fit.get("kind") == "depth":
        depths = sorted({j["report"]["params"]["layers"] for j in ok})
        if params["layers"] > depths[-1]:
            out["partial"] = (f"sweep S{block['sweep']} measured layers "
                              f"{', '.join(map(str, depths))}; predicted at {params['layers']}")
    elif ok[0]["report"]["workload"] in ("llm-infer", "llm-train"):
        # A batch sweep of a partial-depth model: its fit is the partial model's time.
        part = depth.partial({"workload": ok[0]["report"]["workload"],
                              "params": fit["defaults"], "trial": f"sweep S{block['sweep']}"})
        if part:
            k = depth.time_factor(fit["defaults"])
            sd = out["sd"] * k["factor"] if out["sd"] is not None else None
            out.update(seconds=seconds * k["factor"], se=se * k["factor"], sd=sd,
                       source=f"{source}, {k['what']}", partial=part,
                       weights_factor=k["weights_factor"],
                       config={"layers": depth.full_params(fit["defaults"])["layers"]})
    return ok, out


def _check_depth_block(block: dict, params: dict) -> None:
    """A block from a depth sweep names the depth it is for (the sweep ran several)."""
    full = depth.full_params(params)
    if "layers" not in block["predict"]:
        raise PlanError(f"Sweep S{block['sweep']} is a depth sweep: give the depth the block "
                        "is for, layers=N" + (f" ({params['preset']}'s full depth is "
                                              f"layers={full['layers']})" if full else ""))
    if full and block["predict"]["layers"] > full["layers"]:
        raise PlanError(f"{params['preset']} has {full['layers']} layers; predict at "
                        f"layers=1..{full['layers']}")


def _partial_prediction(trials: list[dict]) -> dict | None:
    """A block from a partial-depth trial: its time at the full depth, by a
    stated model (bot/depth.time_factor), marked until a full-depth trial
    replaces it."""
    first = trials[0]["report"]
    part = depth.partial(first)
    if part is None:
        return None
    pr = planner.per_run(trials)
    k = depth.time_factor(first["params"])
    return {"seconds": pr["mean"] * k["factor"], "se": math.nan, "dof": 0, "sd": None,
            "source": f"per {pr['unit']} ({pr['source']}), {k['what']}", "partial": part,
            "no_interval": "a model-scaled time has no measured spread at the full depth",
            "weights_factor": k["weights_factor"],
            "config": {"layers": depth.full_params(first["params"])["layers"]}}


def estimates(queue: JobQueue, plan: dict, blocks: list[dict] | None = None
              ) -> list[tuple[dict, dict, list[dict]]]:
    """(block, estimate, its trials) for every block, in the order they were added."""
    out = []
    facts = plan["facts"]
    single = facts.get("rental") == "single"
    blocks = queue.store.blocks(plan["name"]) if blocks is None else blocks
    for i, block in enumerate(blocks):
        if block["sweep"]:
            trials, predicted = _sweep_prediction(queue, block)
        else:
            trials = _trials(queue, block["trials"])
            predicted = _partial_prediction(trials)
        attempts = queue.store.attempts_of([t["id"] for t in trials])
        usage = None
        if facts.get("idle") == "measured" and trials[0].get("worker"):
            usage = dict(queue.store.worker_usage(trials[0]["worker"]),
                         worker=trials[0]["worker"])
        est = planner.estimate_block(block, trials, attempts, facts,
                                     pays_prep=not single or i == 0, usage=usage,
                                     predicted=predicted)
        out.append((block, est, trials))
    planner.in_hours([e for _, e, _ in out])
    return out


def _block(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    block = dict(cmd.args, plan=cmd.plan, user=user)
    # A block reads its trials' reports: they may come from a private channel.
    homes = ([(f"S{block['sweep']}", j["channel"]) for j in queue.store.sweep_jobs(
        block["sweep"])[:1]] if block["sweep"] else
        [(f"T{i}", j["channel"]) for i in block["trials"] if (j := queue.store.job(i))])
    hidden = [name for name, home in homes if queue.hides(home, user, channel)]
    if hidden:
        raise PlanHidden(f"{', '.join(hidden)} belongs to another channel; a plan here is "
                         "estimated from this channel's trials (or an admin can use any).")
    existing = queue.store.blocks(cmd.plan)
    blocks = ([block if b["kind"] == block["kind"] else b for b in existing]
              if any(b["kind"] == block["kind"] for b in existing) else [*existing, block])
    # Estimated before it is stored: a block that cannot be estimated is not kept.
    block_est, trials = next((e, t) for b, e, t in estimates(queue, plan, blocks)
                             if b["kind"] == block["kind"])
    warnings = planview.block_warnings(plan, block_est, [t["report"] for t in trials])
    replaced = queue.store.put_block(block)
    return planview.block_added(plan, block_est, warnings, replaced)


def _show(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    ests = estimates(queue, plan)
    return planview.show(plan, ests, queue.store.prices(), today,
                         queue.store.plan_jobs(plan["name"]))


def _export(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    ests = estimates(queue, plan)
    price_list = queue.store.prices()
    whom = {"user": user, "response_url": cmd.args.get("response_url")}
    queue.store.add_messages([
        dict(planview.export_file(plan, channel, "csv", planview.csv_text(plan, ests, price_list,
                                                                           today)), **whom),
        dict(planview.export_file(plan, channel, "md", planview.markdown(plan, ests, price_list,
                                                                          today)), **whom)])
    queue.on_message()
    return planview.reply(f"Exporting plan *{plan['name']}*: `{plan['name']}-plan.csv` and "
                          f"`{plan['name']}-plan.md` are being uploaded to this channel.")


def _lock(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    if plan["locked"]:
        raise PlanError(f"Plan {cmd.plan} is locked since {plan['locked']['at']}; to lock it to "
                        f"its current trials, `/plan {cmd.plan} unlock` first")
    ests = estimates(queue, plan)
    if not ests:
        raise PlanError(f"Plan {cmd.plan} has no blocks to lock; add one with "
                        f"`/plan {cmd.plan} block baseline runs=N trial=T12`")
    locked = {b["kind"]: {"config": e["config"], "code": e["code"], "trials": e["trials"]}
              for b, e, _ in ests}
    locked["at"] = today.isoformat()
    queue.store.set_plan_lock(cmd.plan, locked)
    return planview.locked(queue.store.plan(cmd.plan))


def _unlock(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    if not plan["locked"]:
        raise PlanError(f"Plan {cmd.plan} is not locked")
    queue.store.set_plan_lock(cmd.plan, None)
    return planview.reply(f"Plan *{cmd.plan}* is unlocked: its input conditions and code "
                          "version may change again; `/plan NAME lock` fixes them anew.")


def _advise(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    ests = estimates(queue, plan)
    reports = [dict(t["report"], trial=t["trial"]) for _, _, ts in ests for t in ts]
    total = planner.total([e for _, e, _ in ests])
    prep = sum(float(c["hours"]) for _, e, _ in ests for c in e["components"]
               if c["name"] == "prep")
    fx = advice.facts_of(plan, reports, queue.store.prices(), float(total["hours"]), prep)
    return planview.advice(plan, advice.advise(fx, today))


def _actual(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    kind = cmd.args["block"]
    if kind not in {b["kind"] for b in queue.store.blocks(cmd.plan)}:
        raise PlanError(f"Plan {cmd.plan} has no {kind} block; add it first with "
                        f"`/plan {cmd.plan} block {kind} runs=N trial=T12`")
    if cmd.args.get("slurm"):
        return _slurm_actual(queue, cmd, plan, user)
    try:
        queue.store.add_actual({"plan": cmd.plan, "block": kind, "hours": cmd.args["hours"],
                                "parts": cmd.args["parts"], "runs": cmd.args["runs"],
                                "note": cmd.args["note"], "user": user}, cmd.args.get("request"))
    except DuplicateRequest:
        return planview.reply(f"Already recorded: this {kind} actual arrived twice (Slack "
                              "retried); it is counted once.")
    return planview.reply(f"Recorded for *{plan['name']}* {kind}: {cmd.args['hours']:g} GPU-h "
                          f"actual. `/plan {plan['name']} review` compares it with the estimate.")


SLURM_WORKER_HELP = ("start one on the cluster's login node: `trialbot-worker --server "
                     "http://BOT-HOST:3000 --name hpc --executor slurm --partition P` (README, "
                     "Slurm)")


def _slurm_actual(queue, cmd, plan, user):
    """The bot is not on the cluster: a Slurm worker runs sacct for it. The
    request is stored and leased like a trial; the actual is recorded, and
    posted in the plan's channel, when the worker's answer arrives."""
    slurm = queue.slurm_workers()
    if not slurm:
        raise PlanError("No Slurm worker is registered, and the bot cannot read Slurm's "
                        f"accounting itself: {SLURM_WORKER_HELP}, then ask again")
    row = {"plan": plan["name"], "block": cmd.args["block"], "jobs": cmd.args["slurm"],
           "runs": cmd.args["runs"], "note": cmd.args["note"], "user": user,
           "channel": plan["channel"]}
    try:
        req = queue.submit_slurm_actual(row, cmd.args.get("request"))
    except DuplicateRequest as dup:
        return planview.reply(f"Already received: Slurm accounting request A{dup.jobs[0]} is "
                              "asked for; its answer will be posted in the plan's channel.")
    online = set(queue.online_workers())
    return planview.slurm_asked(plan, req, [w["name"] for w in slurm],
                                [w["name"] for w in slurm if w["name"] in online])


def _review(queue, cmd, user, channel, today):
    plan = _plan(queue, cmd.plan, user, channel)
    return planview.review(plan, review_rows(queue, plan, estimates(queue, plan)))


def review_rows(queue: JobQueue, plan: dict, ests: list) -> list[dict]:
    """Estimate against actual for each block (the review, and the digest's)."""
    # A trial cancelled while it ran held its GPUs too (one cancelled before it
    # started cost nothing).
    jobs = [j for j in queue.store.plan_jobs(plan["name"]) if j["status"] in ("done", "failed")
            or (j["status"] == "cancelled" and j["started"])]
    manual = queue.store.actuals(plan["name"])
    rows = []
    for block, est, trials in ests:
        mine = [j for j in jobs if j["block"] == block["kind"]]
        mine_manual = [m for m in manual if m["block"] == block["kind"]]
        attempts = queue.store.attempts_of([j["id"] for j in mine])
        row = planner.review_block(est, mine, attempts, mine_manual, plan["locked"])
        row["memory"] = planner.memory_compare([t["report"] for t in trials],
                                               [j["report"] for j in mine if j["report"]])
        rows.append(row)
    return rows


def _price(queue, cmd, user, channel, today):
    queue.store.add_price(dict(cmd.args, user=user))
    return planview.price_recorded(cmd.args, today)


def _prices(queue, cmd, user, channel, today):
    return planview.price_list(queue.store.prices(), today)


ACTIONS = {"help": _help, "list": _list, "new": _new, "set": _set, "block": _block,
           "show": _show, "export": _export, "lock": _lock, "unlock": _unlock,
           "advise": _advise, "actual": _actual, "review": _review, "price": _price,
           "prices": _prices}
