"""`plan=NAME block=KIND` on `/trial` (and the "Add to plan…" button): a
trial tagged as a plan block's actual. Checked against the store, so a trial
is never tagged to nothing, nor to a plan its user cannot reach from here."""
from __future__ import annotations

from bot.context import Context, PlanUnreachable, plan_name_problem
from bot.states import Json
from worker.i18n import N_, _


class TagError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def take(ctx: Context, words: list[str], user: str, channel: str) -> tuple[list[str], Json | None]:
    """The words without `plan=` and `block=` (they are not workload
    parameters), and the tags {plan, block} or None."""
    tagged = [w.partition("=") for w in words if w.startswith(("plan=", "block="))]
    tags = {key: value for key, _eq, value in tagged}
    if len(tags) < len(tagged):
        twice = " ".join(f"`{k}={v}`" for k, _eq, v in tagged)
        raise TagError(_("{words}: plan= or block= is given twice; tag a trial to one plan "
                         "and block", words=twice))
    rest = [w for w in words if not w.startswith(("plan=", "block="))]
    if not tags:
        return rest, None
    if set(tags) != {"plan", "block"}:
        given = " ".join(f"`{k}={v}`" for k, v in tags.items())
        raise TagError(_("{words}: tag a trial with both plan=NAME and block=KIND, e.g. "
                         "`plan=adkv block=baseline`", words=given))
    if not plan_name_problem(tags["plan"].lower()):  # names and kinds in any case
        tags = {"plan": tags["plan"].lower(), "block": tags["block"].lower()}
    try:
        plan = ctx.plan(tags["plan"], user, channel)
    except PlanUnreachable as exc:
        raise TagError(exc.message) from None
    kinds = [b["kind"] for b in ctx.store.blocks(plan["name"])]
    if tags["block"] not in kinds:
        if not kinds:
            raise TagError(_("`block={block}`: plan {plan} has no such block; its blocks: none "
                             "yet", block=tags["block"], plan=plan["name"]))
        raise TagError(_("`block={block}`: plan {plan} has no such block; its blocks: {kinds}",
                         block=tags["block"], plan=plan["name"], kinds=", ".join(kinds)))
    return rest, tags


def choices(ctx: Context, user: str, channel: str) -> list[tuple[str, str]]:
    """(plan, block kind) pairs a trial of `channel` can be added to by `user`:
    that channel's plans (every plan for an admin)."""
    return [(p["name"], b["kind"]) for p in ctx.visible_plans(user, channel)[0]
            for b in ctx.store.blocks(p["name"])]


def add(ctx: Context, job_id: int, plan: str, block: str, user: str) -> str:
    """The "Add to plan…" choice: the trial becomes an actual of the block.
    Raises TagError naming what is wrong."""
    job = ctx.store.job(job_id)
    if job is None:
        raise TagError(_("there is no trial T{id}", id=job_id))
    with ctx.queue.speaking(job["channel"]):  # a modal's submission: the card's channel
        # both must exist, and the plan be the trial's channel's (or the user an admin)
        take(ctx, [f"plan={plan}", f"block={block}"], user, job["channel"])
        refused = ctx.allows("run", user, job["channel"], N_("change plans"))
        if refused:
            raise TagError(_("{refused} Nothing was changed.", refused=refused))
        ctx.store.tag_job(job_id, plan, block)
        return _("{trial} now counts as an actual of plan *{plan}*, {block} block "
                 "(`/plan {plan} review`).", trial=job["trial"], plan=plan, block=block)
