"""`/trial`: what the command does, for every adapter (Slack, console).
Parse → act on the queue/store → a reply payload. Bad input creates nothing."""
from __future__ import annotations

import time

from bot.blocks import reply, section
from bot.context import Postable, unwritable_text
from bot.fits import scaling, sweepview
from bot.fits.sweep import fit_sweep
from bot.store import DuplicateRequest, Unwritable
from bot.trials import ab, ladder, parse, routing, tags, views, workerlist, workers
from bot.trials.job import ENDED, WAITING
from bot.words import normalize
from worker import i18n
from worker import spec as specs
from worker.i18n import _


def handle(ctx, text: str, user: str, channel: str,
           request: str | None = None, response_url: str | None = None
           ) -> tuple[dict, dict | None]:
    """Returns (ephemeral reply, the queued job or None). `request` (Slack's
    trigger_id) makes a retried or doubled request queue nothing a second time;
    `response_url` reaches the requester if the channel refuses the trial's messages."""
    with i18n.using(ctx.store.channel_lang(channel)):  # the channel's language
        try:  # once, here: every parser and every echo then sees the plain words
            return _handle(ctx, normalize(text), user, channel, request, response_url)
        except Unwritable as exc:  # locked past the ack's budget, full, read-only
            return reply(_(":x: Nothing was queued or changed: {why}.",
                           why=unwritable_text(exc))), None
        except DuplicateRequest as exc:
            if not exc.jobs:
                return reply(_("Already received: this request (Slack retried it, or it came "
                               "twice) queued nothing. Nothing new was queued.")), None
            trials = ", ".join(f"T{i}" for i in exc.jobs)
            return reply(_("Already received: this request (Slack retried it, or it came "
                           "twice) queued {trials}. Nothing new was queued.",
                           trials=trials)), None


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
        cmd = parse.parse_trial(words, recipes)
    except specs.SpecError as exc:
        return views.error(exc), None
    except (tags.TagError, routing.RouteError) as exc:
        return reply(_(":x: {message}\nNothing was queued.", message=exc.message)), None
    if (tagged or route) and cmd.name not in ("run", "sweep", "ladder", "ab"):
        return reply(_(":x: plan=, block=, gpu=, min_mem= and label= go with a trial "
                       "that runs; `/trial {name}` takes none. Nothing was queued.",
                       name=cmd.name)), None
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
            return reply(_(":lock: {refused} Nothing was queued.", refused=refused)), None
    if cmd.name == "help":
        return reply(views.help_text(recipes)), None
    if cmd.name == "list":
        narrow = {"mine": {"user": user},
                  "running": {"status": WAITING},
                  "failed": {"status": ("failed", "cancelled")}}.get(cmd.which, {})
        return views.job_list(ctx.store.jobs(limit=15, channel=channel, **narrow),
                               cmd.which), None
    if cmd.name == "workers":
        now = time.time()
        out = workerlist.text(ctx.store.worker_states(workerlist.week_start(now)), now,
                              workers.ONLINE_SECONDS)
        stuck = (ctx.allows("admin", user, channel) is None and ctx.store.stuck_messages(
            now - ctx.outbox_alert_minutes * 60, frozenset(workerlist.AUTH_ERRORS)))
        if stuck:  # an admin can fix what keeps messages from Slack
            out = workerlist.stuck_text(stuck, now, ctx.outbox_alert_minutes) + "\n" + out
        return reply(out), None
    if cmd.name == "cancel":
        try:
            return reply(f":no_entry_sign: {cancel(ctx, cmd.job_id, user)}."), None
        except ValueError as exc:
            return reply(f":x: {exc}."), None
    if cmd.name == "status":
        job = ctx.store.job(cmd.job_id)
        if job is None:
            return reply(_(":x: There is no trial T{id}. `/trial list` shows recent ones.",
                           id=cmd.job_id)), None
        if ctx.hides(job["channel"], user, channel):
            return reply(_(":lock: T{id} belongs to another channel; ask there (or an admin "
                           "can ask anywhere).", id=cmd.job_id)), None
        return views.status(job, ctx.store.attempts(job["id"])), None
    if cmd.name == "fit":
        return fit(ctx, cmd, user, channel), None
    first = cmd.specs[0] if cmd.name in ("sweep", "ladder", "ab") else cmd.spec
    if registered and route and not any(routing.matches(w["info"], route) for w in registered):
        have = "\n".join(f"• {routing.worker_line(w)}" for w in registered)
        if tagged and route.get("gpu") and "gpu=" not in text:
            return reply(_(":x: No worker matches `{route}` (the plan's target GPU; give "
                           "`gpu=OTHER` to run elsewhere, or `gpu=any` to run on any worker: a "
                           "trial measured off the target is kept as evidence, not counted in "
                           "the block's actual). Workers:\n{have}\nChange the constraint, or "
                           "start a worker that has it (`trialbot-worker --label KEY=VALUE`). "
                           "Nothing was queued.", route=routing.describe(route), have=have)), None
        return reply(_(":x: No worker matches `{route}`. Workers:\n{have}\nChange the "
                       "constraint, or start a worker that has it (`trialbot-worker --label "
                       "KEY=VALUE`). Nothing was queued.",
                       route=routing.describe(route), have=have)), None

    def runnable(spec) -> bool:
        return any(workers.can_run(w["info"], dict(spec.to_dict(),
                                                   route=route)) for w in registered)

    for s in cmd.specs or (cmd.spec,):
        why = registered and s.workload in specs.HF and workers.hf_refusal(
            s.params, s.workload, [w for w in registered if routing.matches(w["info"], route)])
        if why:
            return reply(_(":x: {why} Nothing was queued.", why=why)), None
    wide = next((s for s in (cmd.specs or (cmd.spec,)) if not s.recipe and not runnable(s)),
                None)
    if registered and wide:
        have = "; ".join(_("{name}: {gpus} GPU(s), {cpus} cores", name=w["name"],
                           gpus=len(w["info"].get("gpus") or []),
                           cpus=w["info"].get("cpus", "?")) for w in registered)
        return reply(_(":x: No worker can run `world={world}` ranks on device={device}: a rank "
                       "needs its own GPU (or CPU core). Workers: {have}. Use a smaller world, "
                       "or start a worker with enough GPUs. Nothing was queued.",
                       world=wide.params.get("world"), device=wide.params.get("device"),
                       have=have)), None
    if first.recipe and not runnable(first):
        return reply(_(":x: No worker can run recipe `{recipe}`: it needs CUDA and every "
                       "worker with it in its recipe file has no NVIDIA GPU. Start a GPU worker "
                       "with that recipe file. Nothing was queued.", recipe=first.recipe)), None
    # Slack is never asked on the ack's path: a channel not known yet holds the
    # trials until its answer, asked once the reply is on its way (settle below).
    postable = ctx.channels.cached(channel)
    held = postable is Postable.UNKNOWN
    where = {"request": request, "route": route, "response_url": response_url, "held": held}
    answer, job = _submit(ctx, cmd, text, user, channel, tagged, where, registered)
    if postable is not Postable.YES:  # after the store's commit, so settle sees these trials
        ctx.channels.confirm(channel)
    notes = (ctx.tag_notes(ctx, tagged, [s.to_dict() for s in cmd.specs or (cmd.spec,)], route)
             if tagged and ctx.tag_notes else [])
    answer = _also(answer, "\n".join(f":warning: {n}" for n in notes))
    if held:
        answer = {**answer, **reply(views.held_note(channel) + "\n" + answer["text"])}
    return answer, job


def settle(ctx, channel: str, refusal: str | None) -> int:
    """Slack answered whether the bot may post in `channel` (None: it may): its
    held trials join the queue, or end unrun with the refusal sent to each
    command's requester. How many were settled."""
    if refusal is None:
        return ctx.queue.release_held(channel)
    held = ctx.store.held_jobs(channel)
    if not held:
        return 0
    with ctx.queue.speaking(channel):
        return ctx.queue.refuse_held(held, refusal)


def _submit(ctx, cmd, text, user, channel, tagged, where, registered) -> tuple[dict, dict]:
    if cmd.name == "ladder":
        jobs = ctx.queue.submit_group("ladder", cmd.specs, cmd.words, user, channel, cmd.budget,
                                  tagged, **where)
        return _also(ladder.queued(jobs, cmd.budget), _waiting(registered, jobs[0])), jobs[-1]
    if cmd.name == "ab":
        jobs = ctx.queue.submit_group("ab", cmd.specs, cmd.words, user, channel, tags=tagged,
                                      **where)
        return _also(ab.queued(jobs), _waiting(registered, jobs[0])), jobs[-1]
    if cmd.name == "sweep":
        jobs = ctx.queue.submit_sweep(cmd.specs, cmd.words, user, channel, tagged, **where)
        # The last job stands for the sweep: its end posts the fit (one worker runs
        # them in order; with several, whichever ends last posts it).
        return views.sweep_queued(jobs, workers.online_for(registered, jobs[0]["spec"]),
                                  _waiting(registered, jobs[0])), jobs[-1]
    job = ctx.queue.submit(cmd.spec, parse.canonical(text.split(), cmd.spec), user, channel,
                           tagged, **where)
    return views.queued(job, workers.online_for(registered, job["spec"]),
                        _waiting(registered, job)), job


def _waiting(registered: list[dict], job: dict) -> str:
    """For a routed trial whose workers are all offline, the line naming them."""
    offline = workers.offline_for(registered, job["spec"])
    return views.waiting_for(job["spec"]["route"], offline, time.time()) if offline else ""


def _also(answer: dict, line: str) -> dict:
    return {**answer, **reply(answer["text"] + "\n" + line)} if line else answer


def cancel(ctx, job_id: int, user: str) -> str:
    """`/trial cancel T12` and the card's Cancel button: the trial's owner, or an
    admin. Returns what happened; raises ValueError naming why it cannot."""
    job = ctx.store.job(job_id)
    with ctx.queue.speaking(job and job["channel"]):  # a click has no command around it
        if job is not None and job["user"] != user and job["status"] in WAITING:
            refused = ctx.allows("admin", user, job["channel"],
                                 i18n.N_("cancel someone else's trial"))
            if refused:
                raise ValueError(_("{trial} was started by <@{user}>; only they or an admin "
                                   "can cancel it. {refused}", trial=job["trial"],
                                   user=job["user"], refused=refused.rstrip(".")))
        try:
            return ctx.queue.cancel(job_id, user)
        except Unwritable as exc:
            raise ValueError(_("nothing was cancelled: {why}", why=unwritable_text(exc))) \
                from None


def fit(ctx, cmd: parse.Command, user: str, channel: str) -> dict:
    """`/trial fit S12 batch=32 gpu=H100`: ask a finished sweep, in its own channel."""
    jobs = ctx.store.sweep_jobs(cmd.sweep_id)
    if not jobs:
        return views.sweep_not_found(cmd.sweep_id)
    if ctx.hides(jobs[0]["channel"], user, channel):
        return reply(_(":lock: S{id} belongs to another channel; ask there (or an admin "
                       "can ask anywhere).", id=cmd.sweep_id))
    if any(j["status"] not in ENDED for j in jobs):
        return views.sweep_unfinished(cmd.sweep_id, jobs)
    result = fit_sweep([j["report"] for j in jobs])
    if result.get("kind") == "depth" and not result.get("error"):
        for key, value in cmd.params.items():
            if key != "layers":
                return reply(_(":x: `{key}={value}`: S{id} is a depth sweep; it answers "
                               "layers=N (e.g. `/trial fit S{id} layers=32 gpu=H100`).",
                               key=key, value=value, id=cmd.sweep_id))
    elif not result.get("error"):
        known = {result["variables"]["batch"], *result["variables"]["length"],
                 *result["defaults"]}
        for key, value in cmd.params.items():
            if key not in known:
                axes = [k for k in (result["variables"]["batch"], *result["variables"]["length"])
                        if k] or ["batch"]
                return reply(_(":x: `{key}={value}`: sweep S{id} has no parameter `{key}`; "
                               "ask with {axes} (e.g. `/trial fit S{id} {axis}=32 gpu=H100`).",
                               key=key, value=value, id=cmd.sweep_id, axes=", ".join(axes),
                               axis=axes[0]))
        held = _held_fixed(cmd, jobs, result)
        if held:
            return held
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
        note = (_("The chart ({file}) is being uploaded to this channel.", file=drawn["file"])
                if home else
                _("The chart ({file}) comes to you in a direct message, since S{id} belongs to "
                  "another channel.", file=drawn["file"], id=cmd.sweep_id))
        answer = dict(answer, text=f"{answer['text']}\n{note}",
                      blocks=[*answer["blocks"][:49], section(note)])
    return answer



def _held_fixed(cmd: parse.Command, jobs: list[dict], result: dict) -> dict | None:
    """A recipe sweep answers only on what it varied (as /plan's sweep blocks do)."""
    if not result.get("recipe"):
        return None
    varied = scaling.swept(result)
    measured = next((j["report"]["params"] for j in jobs if j.get("report")), {})
    for key, value in cmd.params.items():
        if key not in varied:
            return reply(_(":x: `{key}={value}`: sweep S{id} varied {swept}; {key} was "
                           "{measured} in every trial, so its fit says nothing about "
                           "{key}={value}. Ask with {words}.", key=key, value=value,
                           id=cmd.sweep_id, swept=", ".join(varied),
                           measured=measured.get(key), words=" ".join(
                               f"{k}=N" for k in varied)))
    return None


CLICK_SECONDS = 30  # a user's clicks on one card within this are one click


def rerun(ctx, job_id: int, user: str, request: str | None = None,
          response_url: str | None = None, card: str | None = None) -> dict:
    """The "Re-run" button: the same trial again, by whoever clicked, in its
    channel. `request` is the click's trigger_id (Slack's retries repeat it);
    `card` names the message clicked on: each click has a trigger_id of its own,
    so a double click is caught by card and user. Called after the click's ack
    (bot/slack/listeners/actions.py): it may wait for Slack's word on the channel."""
    old = ctx.store.job(job_id)
    with ctx.queue.speaking(old and old["channel"]):  # the card's channel's language
        try:
            return _rerun(ctx, job_id, old, user, request, response_url, card)
        except Unwritable as exc:
            return reply(_(":x: Nothing was queued: {why}.", why=unwritable_text(exc)))


def _rerun(ctx, job_id: int, old: dict | None, user: str, request: str | None,
           response_url: str | None, card: str | None) -> dict:
    if old is None:
        return reply(_(":x: There is no trial T{id} any more; nothing was queued.", id=job_id))
    refused = ctx.allows("run", user, old["channel"])
    if refused:
        return reply(_(":lock: {refused} Nothing was queued.", refused=refused))
    try:
        spec = specs.TrialSpec.from_dict(old["spec"])
    except (KeyError, TypeError, ValueError) as exc:
        return reply(_(":x: T{id}'s stored spec cannot be read ({error}); type the command "
                       "again: `/trial {words}`. Nothing was queued.", id=job_id, error=exc,
                       words=old["words"]))
    registered = ctx.store.workers()
    if registered and not any(workers.can_run(w["info"], old["spec"]) for w in registered):
        return reply(_(":x: No registered worker can run T{id} again (its recipe, ranks or "
                       "route need a worker that is not there). Nothing was queued.", id=job_id))
    unpostable = ctx.channels.refusal(old["channel"])
    if unpostable:
        return reply(_(":x: {refusal}; then click again. Nothing was queued.",
                       refusal=unpostable))
    try:
        keys = [(request, None), (card and f"rerun:{card}:{user}", CLICK_SECONDS)]
        job = ctx.queue.submit(spec, old["words"], user, old["channel"], request=keys,
                           route=old["spec"].get("route"), response_url=response_url)
    except DuplicateRequest as exc:
        return reply(_("Already received: your click on this card queued T{id}; nothing new "
                       "was queued. To run it once more, click again after {seconds} s.",
                       id=exc.jobs[0], seconds=CLICK_SECONDS))
    return views.queued(job, workers.online_for(registered, job["spec"]),
                        _waiting(registered, job))
