"""`/trial`: what the command does, for every adapter (Slack, console).
Parse → act on the queue/store → a reply payload. Bad input creates nothing."""
from __future__ import annotations

import shlex
import time

from bot.blocks import reply, section
from bot.fits import sweepview
from bot.fits.sweep import fit_sweep
from bot.store import DuplicateRequest
from bot.trials import ab, ladder, parse, routing, tags, views, workerlist, workers
from bot.trials.job import ENDED
from bot.words import normalize
from worker import i18n
from worker import spec as specs


def handle(ctx, text: str, user: str, channel: str,
           request: str | None = None, response_url: str | None = None
           ) -> tuple[dict, dict | None]:
    """Returns (ephemeral reply, the queued job or None). `request` (Slack's
    trigger_id) makes a retried or doubled request queue nothing a second time;
    `response_url` reaches the requester if the channel refuses the trial's messages."""
    with i18n.using(ctx.store.channel_lang(channel)):  # the channel's language
        try:  # once, here: every parser and every echo then sees the plain words
            return _handle(ctx, normalize(text), user, channel, request, response_url)
        except DuplicateRequest as exc:
            trials = ", ".join(f"T{i}" for i in exc.jobs) or "nothing"
            return reply(f"Already received: this request (Slack retried it, or it came "
                         f"twice) queued {trials}. Nothing new was queued."), None


READ_ONLY = ("help", "list", "workers", "status", "fit", "cancel")


def _handle(ctx, text: str, user: str, channel: str,
            request: str | None, response_url: str | None) -> tuple[dict, dict | None]:
    registered = ctx.store.workers()  # read once: /trial must ack within Slack's 3 s
    recipes = workers.recipes_of(registered)
    try:
        # `plan=NAME block=KIND` make the trial a plan's actual, and `gpu= min_mem=
        # label=` say where it may run; none of them are workload parameters.
        words, tagged = tags.take(ctx, parse.split(text), user, channel)
        # (`/trial fit S12 gpu=H100` asks about a GPU: there gpu= is the question)
        words, route = (words, {}) if words[:1] == ["fit"] else routing.take(words, registered)
        cmd = parse.parse_trial(shlex.join(words), recipes)
    except specs.SpecError as exc:
        return views.error(exc), None
    except (tags.TagError, routing.RouteError) as exc:
        return reply(f":x: {exc.message}\nNothing was queued."), None
    if (tagged or route) and cmd.name not in ("run", "sweep", "ladder", "ab"):
        return reply(":x: plan=, block=, gpu=, min_mem= and label= go with a trial "
                            f"that runs; `/trial {cmd.name}` takes none. Nothing was queued."), None
    if tagged and "gpu" not in route and not route.get("anywhere"):  # the plan's target
        target = (ctx.store.plan(tagged["plan"]) or {}).get("facts", {}).get("gpu")
        try:  # a target that names no GPU (`gpu=cpu`, a typo) routes nowhere
            route["gpu"] = routing.gpu_name(target, registered) if target else None
        except routing.RouteError:
            pass
        if not route.get("gpu"):
            route.pop("gpu", None)
    if cmd.name not in READ_ONLY:  # cancel checks owner-or-admin itself
        # A tagged plan is this channel's or the user an admin (bot/trials/tags.py): the
        # right here is the right to change it.
        refused = ctx.allows("run", user, channel)
        if refused:
            return reply(f":lock: {refused} Nothing was queued."), None
    if cmd.name == "help":
        return reply(views.help_text(recipes)), None
    if cmd.name == "list":
        narrow = {"mine": {"user": user}, "running": {"status": ("queued", "running")},
                  "failed": {"status": ("failed", "cancelled")}}.get(cmd.which, {})
        return views.job_list(ctx.store.jobs(limit=15, channel=channel, **narrow),
                               cmd.which), None
    if cmd.name == "workers":
        now = time.time()
        return reply(workerlist.text(ctx.store.worker_states(
            workerlist.week_start(now)), now, workers.ONLINE_SECONDS)), None
    if cmd.name == "cancel":
        try:
            return reply(f":no_entry_sign: {cancel(ctx, cmd.job_id, user)}."), None
        except ValueError as exc:
            return reply(f":x: {exc}."), None
    if cmd.name == "status":
        job = ctx.store.job(cmd.job_id)
        if job is None:
            return reply(f":x: There is no trial T{cmd.job_id}. `/trial list` shows "
                                "recent ones."), None
        if ctx.hides(job["channel"], user, channel):
            return reply(f":lock: T{cmd.job_id} belongs to another channel; ask "
                                "there (or an admin can ask anywhere)."), None
        return views.status(job, ctx.store.attempts(job["id"])), None
    if cmd.name == "fit":
        return fit(ctx, cmd, user, channel), None
    first = cmd.specs[0] if cmd.name in ("sweep", "ladder", "ab") else cmd.spec
    if registered and route and not any(routing.matches(w["info"], route) for w in registered):
        have = "\n".join(f"• {routing.worker_line(w)}" for w in registered)
        from_plan = (" (the plan's target GPU; give `gpu=OTHER` to run elsewhere, or "
                     "`gpu=any` to run on any worker: a trial measured off the target is kept "
                     "as evidence, not counted in the block's actual)"
                     if tagged and route.get("gpu") and "gpu=" not in text else "")
        return reply(f":x: No worker matches `{routing.describe(route)}`{from_plan}. "
                            f"Workers:\n{have}\nChange the constraint, or start a worker "
                            "that has it (`trialbot-worker --label KEY=VALUE`). Nothing was "
                            "queued."), None

    def runnable(spec) -> bool:
        return any(workers.can_run(w["info"], dict(spec.to_dict(),
                                                   route=route)) for w in registered)

    for s in cmd.specs or (cmd.spec,):
        why = registered and s.workload in specs.HF and workers.hf_refusal(
            s.params, s.workload, [w for w in registered if routing.matches(w["info"], route)])
        if why:
            return reply(f":x: {why} Nothing was queued."), None
    wide = next((s for s in (cmd.specs or (cmd.spec,)) if not s.recipe and not runnable(s)),
                None)
    if registered and wide:
        have = "; ".join(f"{w['name']}: {len(w['info'].get('gpus') or [])} GPU(s), "
                         f"{w['info'].get('cpus', '?')} cores" for w in registered)
        return reply(f":x: No worker can run `world={wide.params.get('world')}` ranks on "
                            f"device={wide.params.get('device')}: a rank needs its own GPU (or "
                            f"CPU core). Workers: {have}. Use a smaller world, or start a worker "
                            "with enough GPUs. Nothing was queued."), None
    if first.recipe and not runnable(first):
        return reply(f":x: No worker can run recipe `{first.recipe}`: it needs CUDA "
                            "and every worker with it in its recipe file has no NVIDIA GPU. "
                            "Start a GPU worker with that recipe file. Nothing was queued."), None
    unpostable = ctx.channels.refusal(channel)  # asked last: it may be a call to Slack
    if unpostable:
        return reply(f":x: {unpostable}; then run the command again. Nothing was "
                            "queued."), None
    where = {"request": request, "route": route, "response_url": response_url}
    answer, job = _submit(ctx, cmd, text, user, channel, tagged, where)
    notes = (ctx.tag_notes(ctx, tagged, [s.to_dict() for s in cmd.specs or (cmd.spec,)], route)
             if tagged and ctx.tag_notes else [])
    if notes:
        answer = {**answer, **reply(answer["text"] + "".join(f"\n:warning: {n}" for n in notes))}
    return answer, job


def _submit(ctx, cmd, text, user, channel, tagged, where) -> tuple[dict, dict]:
    if cmd.name == "ladder":
        jobs = ctx.queue.submit_group("ladder", cmd.specs, cmd.words, user, channel, cmd.budget,
                                  tagged, **where)
        return ladder.queued(jobs, cmd.budget), jobs[-1]
    if cmd.name == "ab":
        jobs = ctx.queue.submit_group("ab", cmd.specs, cmd.words, user, channel, tags=tagged,
                                      **where)
        return ab.queued(jobs), jobs[-1]
    if cmd.name == "sweep":
        jobs = ctx.queue.submit_sweep(cmd.specs, cmd.words, user, channel, tagged, **where)
        # The last job stands for the sweep: its end posts the fit (one worker runs
        # them in order; with several, whichever ends last posts it).
        return views.sweep_queued(jobs, workers.online_for(ctx.store, jobs[0]["spec"])), jobs[-1]
    job = ctx.queue.submit(cmd.spec, parse.canonical(text.split(), cmd.spec), user, channel,
                           tagged, **where)
    return views.queued(job, workers.online_for(ctx.store, job["spec"])), job


def cancel(ctx, job_id: int, user: str) -> str:
    """`/trial cancel T12` and the card's Cancel button: the trial's owner, or an
    admin. Returns what happened; raises ValueError naming why it cannot."""
    job = ctx.store.job(job_id)
    if job is not None and job["user"] != user and job["status"] in ("queued", "running"):
        refused = ctx.allows("admin", user, job["channel"], i18n.N_("cancel someone else's trial"))
        if refused:
            raise ValueError(f"{job['trial']} was started by <@{job['user']}>; only they or an "
                             f"admin can cancel it. {refused.rstrip('.')}")
    return ctx.queue.cancel(job_id, user)


def fit(ctx, cmd: parse.Command, user: str, channel: str) -> dict:
    """`/trial fit S12 batch=32 gpu=H100`: ask a finished sweep, in its own channel."""
    jobs = ctx.store.sweep_jobs(cmd.sweep_id)
    if not jobs:
        return views.sweep_not_found(cmd.sweep_id)
    if ctx.hides(jobs[0]["channel"], user, channel):
        return reply(f":lock: S{cmd.sweep_id} belongs to another channel; ask there (or "
                            "an admin can ask anywhere).")
    if any(j["status"] not in ENDED for j in jobs):
        return views.sweep_unfinished(cmd.sweep_id, jobs)
    result = fit_sweep([j["report"] for j in jobs])
    if result.get("kind") == "depth" and not result.get("error"):
        for key, value in cmd.params.items():
            if key != "layers":
                return reply(f":x: `{key}={value}`: S{cmd.sweep_id} is a depth sweep; "
                                    f"it answers layers=N (e.g. `/trial fit S{cmd.sweep_id} "
                                    "layers=32 gpu=H100`).")
    elif not result.get("error"):
        known = {result["variables"]["batch"], *result["variables"]["length"],
                 *result["defaults"]}
        for key, value in cmd.params.items():
            if key not in known:
                axes = [k for k in (result["variables"]["batch"], *result["variables"]["length"])
                        if k] or ["batch"]
                return reply(f":x: `{key}={value}`: sweep S{cmd.sweep_id} has no "
                                    f"parameter `{key}`; ask with {', '.join(axes)} (e.g. "
                                    f"`/trial fit S{cmd.sweep_id} {axes[0]}=32 gpu=H100`).")
    answer = sweepview.sweep_answer(cmd.sweep_id, jobs, result, cmd.params, cmd.gpu)
    # A question with a config gets the chart with its prediction (the fit's own
    # chart was posted with the fit). An ephemeral answer holds no file: the chart
    # goes to the sweep's channel, or to the asker alone when an admin asks
    # elsewhere, so a sweep is never shown in a channel it does not belong to.
    drawn = sweepview.sweep_chart(cmd.sweep_id, channel, result, cmd.params) \
        if cmd.params else None
    if drawn:
        home = channel == jobs[0]["channel"]
        ctx.store.add_messages([dict(drawn, user=user, **({} if home else {"via": "dm"}))])
        ctx.notify()
        note = (f"The chart ({drawn['file']}) is being uploaded to this channel." if home else
                f"The chart ({drawn['file']}) comes to you in a direct message, since "
                f"S{cmd.sweep_id} belongs to another channel.")
        answer = dict(answer, text=f"{answer['text']}\n{note}",
                      blocks=[*answer["blocks"][:49], section(note)])
    return answer



CLICK_SECONDS = 30  # a user's clicks on one card within this are one click


def rerun(ctx, job_id: int, user: str, request: str | None = None,
          response_url: str | None = None, card: str | None = None) -> dict:
    """The "Re-run" button: the same trial again, by whoever clicked, in its
    channel. `request` is the click's trigger_id (Slack's retries repeat it);
    `card` names the message clicked on: each click has a trigger_id of its own,
    so a double click is caught by card and user."""
    old = ctx.store.job(job_id)
    if old is None:
        return reply(f":x: There is no trial T{job_id} any more; nothing was queued.")
    refused = ctx.allows("run", user, old["channel"])
    if refused:
        return reply(f":lock: {refused} Nothing was queued.")
    try:
        spec = specs.TrialSpec.from_dict(old["spec"])
    except (KeyError, TypeError, ValueError) as exc:
        return reply(f":x: T{job_id}'s stored spec cannot be read ({exc}); type the "
                            f"command again: `/trial {old['words']}`. Nothing was queued.")
    registered = ctx.store.workers()
    if registered and not any(workers.can_run(w["info"], old["spec"]) for w in registered):
        return reply(f":x: No registered worker can run T{job_id} again (its recipe, "
                            "ranks or route need a worker that is not there). Nothing was "
                            "queued.")
    unpostable = ctx.channels.refusal(old["channel"])
    if unpostable:
        return reply(f":x: {unpostable}; then click again. Nothing was queued.")
    try:
        keys = [(request, None), (card and f"rerun:{card}:{user}", CLICK_SECONDS)]
        job = ctx.queue.submit(spec, old["words"], user, old["channel"], request=keys,
                           route=old["spec"].get("route"), response_url=response_url)
    except DuplicateRequest as exc:
        return reply(f"Already received: your click on this card queued "
                            f"T{exc.jobs[0]}; nothing new was queued. To run it once more, "
                            f"click again after {CLICK_SECONDS} s.")
    return views.queued(job, workers.online_for(ctx.store, job["spec"]))
