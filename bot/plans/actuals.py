"""`/plan NAME actual KIND ...`: record what a block really took (by hand, or
from Slurm through a Slurm worker), correct one recorded actual field by field,
delete some. Each actual keeps its number (#4) for good: a correction changes
it in place, and a deleted number is never handed out again
(bot/store/migrations.py)."""
from __future__ import annotations

from bot import figures
from bot.context import Context
from bot.plans import actualparse, changes, estimate, review, reviewview, service, views
from bot.plans.entry import Asked, plan_of
from bot.plans.grammar import PlanCommand, PlanError
from bot.states import Json
from bot.store import DuplicateRequest
from bot.trials import workers
from worker.i18n import _

IMPLAUSIBLE = 1000  # an actual this many times its estimate is asked to be confirmed


def handle(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    kind = cmd.args["block"]
    if kind not in {b["kind"] for b in ctx.store.blocks(plan["name"])}:
        raise PlanError(_("Plan {plan} has no {kind} block; add it first with "
                          "`/plan {plan} block {kind} runs=N trial=T12`", plan=cmd.plan,
                          kind=kind))
    if cmd.args.get("slurm"):
        return _slurm_actual(ctx, cmd, plan, asked)
    if cmd.args.get("delete"):
        return _delete(ctx, plan, kind, cmd.args.get("ids"), asked)
    if cmd.args.get("correct"):
        return _correct(ctx, plan, kind, cmd.args, asked)
    if not cmd.args.get("confirm"):
        _plausible(ctx, plan, kind, cmd.args["hours"],
                   f"/plan {plan['name']} actual {kind} hours={cmd.args['hours']:g} confirm")
    try:
        ctx.store.add_actual(
            {"plan": cmd.plan, "block": kind, "hours": cmd.args["hours"],
             "parts": cmd.args["parts"], "runs": cmd.args["runs"], "note": cmd.args["note"],
             "user": asked.user}, asked.request)
    except DuplicateRequest:
        return views.reply(_("Already recorded: this {kind} actual arrived twice (Slack "
                             "retried); it is counted once.", kind=kind))
    return changes.actual_recorded(plan, kind, cmd.args["hours"], _actuals_now(ctx, plan, kind))


def _no_such(plan: Json, kind: str, aid: int, mine: list[Json]) -> PlanError:
    return PlanError(
        _("Plan {plan}'s {kind} block has no recorded actual #{id}; its actuals: "
          "{actuals}", plan=plan["name"], kind=kind, id=aid,
          actuals=", ".join(f"#{a['id']}" for a in mine) or _("none")))


def _delete(ctx: Context, plan: Json, kind: str, ids: list[int] | None, asked: Asked) -> Json:
    mine = [a for a in ctx.store.actuals(plan["name"]) if a["block"] == kind]
    unknown = [i for i in ids or [] if i not in {a["id"] for a in mine}]
    if unknown:
        raise _no_such(plan, kind, unknown[0], mine)
    gone = ctx.store.delete_actuals(plan["name"], kind, asked.user, ids)
    if not gone:
        raise PlanError(_("Plan {plan} has no recorded {kind} actual to delete (a tagged "
                          "trial is a trial, not a recorded actual)", plan=plan["name"],
                          kind=kind))
    return changes.actuals_deleted(plan, kind, gone, _actuals_now(ctx, plan, kind))


def _correct(ctx: Context, plan: Json, kind: str, args: Json, asked: Asked) -> Json:
    """The fields named change on one actual, in place; the rest stay."""
    mine = [a for a in ctx.store.actuals(plan["name"]) if a["block"] == kind]
    values = dict(plan=plan["name"], kind=kind)
    if args["id"] is not None:
        old = next((a for a in mine if a["id"] == args["id"]), None)
        if old is None:
            raise _no_such(plan, kind, args["id"], mine)
    elif not mine:
        raise PlanError(_("Plan {plan}'s {kind} block has no recorded actual to correct (a "
                          "tagged trial is a trial); record one with `/plan {plan} actual "
                          "{kind} hours=H`", **values))
    elif len(mine) > 1:
        raise PlanError(_("Plan {plan}'s {kind} block has {n} recorded actuals ({actuals}); "
                          "name the one to correct, e.g. `/plan {plan} actual {kind} correct "
                          "#{id} hours=H`", n=len(mine), id=mine[-1]["id"],
                          actuals=", ".join(f"#{a['id']}" for a in mine), **values))
    else:
        old = mine[0]
    fields = actualparse.corrected(old, args["changes"])
    if "hours" in fields and not args.get("confirm"):
        _plausible(ctx, plan, kind, fields["hours"],
                   f"/plan {plan['name']} actual {kind} correct #{old['id']} "
                   f"hours={fields['hours']:g} confirm")
    try:
        ctx.store.correct_actual(old["id"], fields, asked.user, asked.request)
    except DuplicateRequest:
        return views.reply(_("Already corrected: this correction of #{id} arrived twice (Slack "
                             "retried); it is applied once.", id=old["id"]))
    return changes.actual_corrected(plan, kind, old, {**old, **fields},
                                    _actuals_now(ctx, plan, kind))


def _plausible(ctx: Context, plan: Json, kind: str, hours: float, again: str) -> None:
    """A figure a thousand times the block's estimate is more likely a slip (minutes
    typed as hours, a digit too many) than a run: it is refused until confirmed."""
    try:
        est = next(e for b, e, _t in service.estimates(ctx, plan) if b["kind"] == kind)
    except (StopIteration, PlanError, estimate.EstimateError):
        return  # no estimate to compare with: nothing to judge it by
    if est["hours"] > 0 and hours > IMPLAUSIBLE * float(est["hours"]):
        raise PlanError(_("hours={hours} is {times}× the {kind} block's estimate of {estimate} "
                          "GPU-h; check the digits and the unit (GPU-hours, not minutes), or "
                          "add `confirm` if it really took that long: `{again}`",
                          hours=f"{hours:g}", times=f"{hours / float(est['hours']):,.0f}",
                          kind=kind, estimate=figures.gpu_hours(est["hours"]), again=again))


def _actuals_now(ctx: Context, plan: Json, kind: str) -> str:
    rows = [a for a in ctx.store.actuals(plan["name"]) if a["block"] == kind]
    tagged = [j["trial"] for j in ctx.store.plan_jobs(plan["name"]) if j["block"] == kind]
    return changes.actuals_now(plan, kind, rows, review.latest_per_source(rows), tagged)


def _slurm_actual(ctx: Context, cmd: PlanCommand, plan: Json, asked: Asked) -> Json:
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
           "runs": cmd.args["runs"], "note": cmd.args["note"], "user": asked.user,
           "channel": plan["channel"]}
    try:
        req = ctx.queue.submit_slurm_actual(row, asked.request)
    except DuplicateRequest as dup:
        return views.reply(_("Already received: Slurm accounting request A{id} is asked for; "
                             "its answer will be posted in the plan's channel.",
                             id=dup.jobs[0]))
    online = set(workers.online(ctx.store))
    return reviewview.slurm_asked(plan, req, [w["name"] for w in slurm],
                                [w["name"] for w in slurm if w["name"] in online])
