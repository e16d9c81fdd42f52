"""`/plan NAME check [repo=URL_OR_PATH] [commit=SHA]` (#34): ask a worker to
fetch the repository at its commit and read it without running it; record
its answer per plan, fill the checklist items still empty, and post it.

The request is stored and leased as a Slurm accounting request is
(bot/store/checks.py, bot/trials/queue.py): nothing is lost or posted twice
when a worker or the bot is killed, and a lease expires."""
from __future__ import annotations

import re

from bot.context import Context
from bot.fits import compat as fits
from bot.plans import checkparse, checkview, views
from bot.plans.entry import Asked, plan_of
from bot.plans.grammar import PlanCommand, PlanError
from bot.states import CheckStatus, Json
from bot.store import DuplicateRequest
from bot.trials import workers
from bot.trials.queue import COMPAT_SCHEMA, LeaseLost
from worker import i18n
from worker.i18n import _

ERRORS = ("fetch", "commit", "timeout", "unreadable")
FULL = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # a SHA-1 or SHA-256 commit


def handle(ctx: Context, cmd: PlanCommand, asked: Asked) -> Json:
    plan = plan_of(ctx, cmd.plan, asked)
    repo, commit = checkparse.target(cmd.args, plan["facts"].get("repo"), plan["name"])
    readers = [w for w in ctx.store.workers() if w["info"].get("compat") == COMPAT_SCHEMA]
    if not readers:
        raise PlanError(_("No worker that reads repositories is registered, and the bot "
                          "fetches no code itself: start one (a CPU box is enough) with "
                          "`trialbot-worker --server http://BOT-HOST:3000 --name NAME`, then "
                          "ask again"))
    row = {"plan": plan["name"], "repo": repo, "commit": commit, "user": asked.user,
           "channel": plan["channel"]}
    try:
        check = ctx.queue.submit_check(row, asked.request)
    except DuplicateRequest as dup:
        return views.reply(_("Already received: compatibility check C{id} is asked for; its "
                             "answer will be posted in the plan's channel.", id=dup.jobs[0]))
    online = set(workers.online(ctx.store))
    names = [w["name"] for w in readers]
    return checkview.asked(plan, check, names, [n for n in names if n in online])


def problem(result: object) -> str | None:
    """What is wrong with a worker's answer, or None."""
    if not isinstance(result, dict):
        return "`result` must be a JSON object: {repo, commit, report} or {repo, error}"
    if "error" in result:
        error = result["error"]
        if not (isinstance(error, dict) and error.get("why") in ERRORS
                and isinstance(error.get("message"), str)):
            return f"`result.error` must be {{why: one of {', '.join(ERRORS)}, message}}"
        return None
    if not (isinstance(result.get("commit"), str) and FULL.fullmatch(result["commit"])):
        return "`result.commit` must be the full commit hash read"
    if not isinstance(result.get("report"), dict):
        return "`result.report` must be the trialbot.compat/1 report read (or give `error`)"
    try:
        checkview.report_of(result)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return f"`result.report` is not a trialbot.compat/1 report: {exc!r}"
    return None


def answer(ctx: Context, check_id: int, worker: str, lease: str, result: Json,
           key: str | None = None) -> Json:
    """A worker's answer: recorded, the empty checklist items filled and the
    answer posted in the plan's channel, in one transaction. Raises LeaseLost
    when the check is not leased to `worker` under `lease`."""
    held = ctx.store.check(check_id)
    if held is None:
        raise LeaseLost(f"there is no compatibility check C{check_id}")
    if held["worker"] != worker or held["lease"] != lease:
        raise LeaseLost(f"C{check_id} is not leased to {worker} under this lease")
    plan = ctx.store.plan(held["plan"])
    assert plan is not None  # a plan is never deleted
    report = checkview.report_of(result)
    read = report is not None and report.python_files > 0
    fills = (checkview.fills(plan["facts"], report, fits.verdicts(report))
             if report is not None and read else {})
    with i18n.using(ctx.store.channel_lang(held["channel"])):  # posted in the plan's channel
        filled = ctx.store.finish_check(
            held, CheckStatus.DONE if read else CheckStatus.FAILED, result, fills,
            lambda filled: checkview.answered(held, plan, result, filled), key=key)
    if filled is None:
        raise LeaseLost(f"C{check_id} is not leased to {worker} under this lease")
    ctx.notify()
    done = ctx.store.check(check_id)
    assert done is not None  # read above, and a check is never deleted
    return done
