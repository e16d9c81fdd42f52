"""`/trial`: what the command does, for every adapter (Slack, console).
One table (TABLE) gives each sub-command its parser, its handler and its
paragraphs in `/trial help`. Parse → act on the queue/store → a reply.
Bad input creates nothing. A tagged trial's plan notes are added a layer
above (bot/commands.py), from what the Answer carries."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

from bot.blocks import about, help_reply, reply
from bot.context import Context, Postable, unwritable_text
from bot.fits import gpus
from bot.states import WAITING, JobStatus, Json
from bot.store import DuplicateRequest, Unwritable
from bot.trials import ab, fitask, ladder, parse, routing, tags, views, workerlist, workers
from bot.trials.parse import Command
from bot.words import normalize
from worker import i18n
from worker.api import specs
from worker.i18n import N_, _, did_you_mean, sentences


@dataclass(frozen=True)
class Asked:
    """One `/trial` as received, with what was read once for it."""
    text: str  # normalized
    user: str
    channel: str
    request: str | None  # Slack's trigger_id: a retried request queues nothing twice
    response_url: str | None  # reaches the requester if the channel refuses the trial's messages
    registered: list[Json]  # the workers, read once: /trial must ack within Slack's 3 s
    tagged: Json | None = None  # plan= block=
    route: Json = field(default_factory=dict)  # gpu= min_mem= label=


@dataclass(frozen=True)
class Answer:
    """The ephemeral reply and the queued job (a group's last) or None; for a
    tagged trial, what the plan's notes are read from (bot/commands.py)."""
    reply: Json
    job: Json | None = None
    tagged: Json | None = None
    specs: tuple[Json, ...] = ()
    route: Json | None = None


@dataclass(frozen=True)
class Entry:
    """A sub-command: its word, its parser ((words, recipes) -> Command), its
    handler ((ctx, cmd, Asked) -> Answer) and its paragraphs in `/trial help`."""
    name: str
    parse: Callable[..., Command]
    handle: Callable[..., Answer]
    help: tuple[str, ...] = ()
    runs: bool = False  # queues trials: needs the right to run; takes plan= and gpu=
    usage: str = ""  # its usage in `/trial help NAME` (else the general one)


def handle(ctx: Context, text: str, user: str, channel: str,
           request: str | None = None, response_url: str | None = None
           ) -> tuple[Json, Json | None]:
    """Returns (ephemeral reply, the queued job or None), without a tagged
    trial's plan notes (bot/commands.py adds them)."""
    out = answer(ctx, text, user, channel, request, response_url)
    return out.reply, out.job


def answer(ctx: Context, text: str, user: str, channel: str,
           request: str | None = None, response_url: str | None = None) -> Answer:
    with i18n.using(ctx.store.channel_lang(channel)):  # the channel's language
        try:  # once, here: every parser and every echo then sees the plain words
            return _answer(ctx, normalize(text), user, channel, request, response_url)
        except Unwritable as exc:  # locked past the ack's budget, full, read-only
            return Answer(reply(_(":x: Nothing was queued or changed: {why}.",
                                  why=unwritable_text(exc))))
        except DuplicateRequest as exc:
            if not exc.jobs:
                return Answer(reply(_("Already received: this request (Slack retried it, or "
                                      "it came twice) queued nothing. Nothing new was "
                                      "queued.")))
            trials = ", ".join(f"T{i}" for i in exc.jobs)
            return Answer(reply(_("Already received: this request (Slack retried it, or it "
                                  "came twice) queued {trials}. Nothing new was queued.",
                                  trials=trials)))


def _answer(ctx: Context, text: str, user: str, channel: str,
            request: str | None, response_url: str | None) -> Answer:
    registered = ctx.store.workers()  # read once: /trial must ack within Slack's 3 s
    try:
        # `plan=NAME block=KIND` make the trial a plan's actual, and `gpu= min_mem=
        # label=` say where it may run; none of them are workload parameters.
        words, tagged = tags.take(ctx, parse.split(text), user, channel)
        # (`/trial fit S12 gpu=H100` asks about a GPU: there gpu= is the question)
        words, route = (words, {}) if words[:1] == ["fit"] else routing.take(words)
        entry, cmd = route_words(words, workers.recipes_of(registered))
    except specs.SpecError as exc:
        return Answer(views.error(exc))
    except (tags.TagError, routing.RouteError) as exc:
        return Answer(reply(_(":x: {message}\nNothing was queued.", message=exc.message)))
    if (tagged or route) and not entry.runs:
        return Answer(reply(_(":x: plan=, block=, gpu=, min_mem= and label= go with a trial "
                              "that runs; `/trial {name}` takes none. Nothing was queued.",
                              name=cmd.name)))
    if entry.runs:  # cancel checks owner-or-admin itself
        # A tagged plan is this channel's or the user an admin (bot/trials/tags.py): the
        # right here is the right to change it.
        refused = ctx.allows("run", user, channel)
        if refused:
            return Answer(reply(_(":lock: {refused} Nothing was queued.", refused=refused)))
    route = _plan_target(ctx, tagged, route)
    return entry.handle(ctx, cmd, Asked(text, user, channel, request, response_url,
                                        registered, tagged, route))


def _plan_target(ctx: Context, tagged: Json | None, route: Json) -> Json:
    """A tagged trial runs on its plan's target GPU unless `gpu=` says otherwise;
    a target that names no GPU (`gpu=cpu`, a typo) routes nowhere."""
    if not tagged or "gpu" in route or route.get("anywhere"):
        return route
    target = (ctx.store.plan(tagged["plan"]) or {}).get("facts", {}).get("gpu")
    try:
        gpu = routing.gpu_name(target) if target else None
    except routing.RouteError:
        gpu = None
    return {**route, "gpu": gpu} if gpu else route


def route_words(words: list[str], recipes: Json | None = None) -> tuple[Entry, Command]:
    """The table's entry for the first word (a workload or `recipe NAME`: run;
    nothing: help), and the words parsed by it. Keywords in any case."""
    words = list(words)
    if words and words[0].lower() in _KEYWORDS:
        words[0] = words[0].lower()  # `/trial STATUS t5`
    elif words:
        hint = did_you_mean(words[0], _KEYWORDS, before="/trial ")
        if hint:  # `/trial statsu T5`: a slip of a sub-command or a workload
            raise specs.SpecError(words[0], sentences(_(
                "`{word}` is not a `/trial` sub-command or workload.", word=words[0]), hint),
                specs.general_usage())
    entry = _NAMED.get(words[0], RUN) if words else _NAMED["help"]
    return entry, entry.parse(words, recipes)


def parse_trial(text: str | list[str], recipes: Json | None = None) -> Command:
    """`/trial`'s text (or its words) as a command, through the table."""
    return route_words(parse.split(text) if isinstance(text, str) else text, recipes)[1]


def help_text(recipes: Json | None = None, topic: str = "") -> str:
    """`/trial help`: what runs, where, what else there is, the workloads and the
    topics; `/trial help TOPIC`: a workload's or recipe's parameters, or the table's
    paragraphs that use a sub-command. A topic there is none of raises SpecError."""
    running = [p for e in TABLE if e.runs for p in e.help]
    others = [p for e in TABLE if not e.runs for p in e.help]
    paragraphs = [_(p, usage=specs.general_usage())
                  for p in [*HELP_HEAD, *running, HELP_WHERE, *others]]
    if topic in ("", "help"):
        return views.help_text(paragraphs, recipes, TOPICS)
    name = topic.removeprefix("recipe ")
    workload = ((recipes or {}).get(name) if topic.startswith("recipe ")
                else specs.WORKLOADS.get(topic))
    if workload is not None:
        return views.workload_help(workload)
    own = _(views.TOPIC_HELP[topic], most=parse.MAX_SWEEP, rounds=ab.ROUNDS,
            rounds_most=ab.MAX_ROUNDS) if topic in views.TOPIC_HELP else ""
    if topic == "where":
        return views.topic_help([own], specs.general_usage())
    if topic in _NAMED:
        return views.topic_help([own, *about(paragraphs[len(HELP_HEAD):], "/trial", topic)],
                                _NAMED[topic].usage or specs.general_usage())
    known = [*TOPICS, *specs.WORKLOADS, *(f"recipe {r}" for r in recipes or {})]
    raise specs.SpecError(topic, sentences(
        _("`/trial help {topic}`: there is no such topic.", topic=topic),
        did_you_mean(topic, known, "/trial help "),
        _("Topics: {topics}, a workload ({workloads}) or `recipe NAME`.",
          topics=", ".join(TOPICS), workloads=", ".join(specs.WORKLOADS))),
        specs.general_usage())


def _help(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    try:
        text = help_text(workers.recipes_of(asked.registered), cmd.topic)
    except specs.SpecError as exc:
        return Answer(views.error(exc))
    return Answer(help_reply(text, _("(continued in this message's blocks)")))


class _Narrow(TypedDict, total=False):  # Store.jobs's filters
    user: str
    status: tuple[str, ...]


def _list(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    narrow: dict[str, _Narrow] = {
        "mine": {"user": asked.user}, "running": {"status": WAITING},
        "failed": {"status": (JobStatus.FAILED, JobStatus.CANCELLED)}}
    return Answer(views.job_list(ctx.store.jobs(limit=15, channel=asked.channel,
                                                **narrow.get(cmd.which or "", _Narrow())),
                                 cmd.which))


def _workers(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    now = time.time()
    out = workerlist.text(ctx.store.worker_states(workerlist.week_start(now)), now,
                          workers.ONLINE_SECONDS)
    stuck = (ctx.allows("admin", asked.user, asked.channel) is None and ctx.store.stuck_messages(
        now - ctx.outbox_alert_minutes * 60, frozenset(workerlist.AUTH_ERRORS)))
    if stuck:  # an admin can fix what keeps messages from Slack
        out = workerlist.stuck_text(stuck, now, ctx.outbox_alert_minutes) + "\n" + out
    return Answer(reply(out))


def _cancel(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    assert cmd.job_id is not None  # parse_trial_id gave it or refused the words
    try:
        return Answer(reply(f":no_entry_sign: {cancel(ctx, cmd.job_id, asked.user)}."))
    except ValueError as exc:
        return Answer(reply(f":x: {exc}."))


def _status(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    assert cmd.job_id is not None  # parse_trial_id gave it or refused the words
    job = ctx.store.job(cmd.job_id)
    if job is None:
        return Answer(reply(_(":x: There is no trial T{id}. `/trial list` shows recent ones.",
                              id=cmd.job_id)))
    if ctx.hides(job["channel"], asked.user, asked.channel):
        return Answer(reply(_(":lock: T{id} belongs to another channel; ask there (or an admin "
                              "can ask anywhere).", id=cmd.job_id)))
    return Answer(views.status(job, ctx.store.attempts(job["id"])))


def _fit(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    return Answer(fitask.fit(ctx, cmd, asked.user, asked.channel))


def _queue(ctx: Context, cmd: Command, asked: Asked) -> Answer:
    """run, sweep, ladder, ab: checked against the workers, then queued."""
    every = cmd.specs or ((cmd.spec,) if cmd.spec else ())
    refused = _unrunnable(every, asked)
    if refused:
        return Answer(reply(refused))
    # Slack is never asked on the ack's path: a channel not known yet holds the
    # trials until its answer, asked once the reply is on its way (settle below).
    postable = ctx.channels.cached(asked.channel)
    held = postable is Postable.UNKNOWN
    where = {"request": asked.request, "route": asked.route,
             "response_url": asked.response_url, "held": held}
    out, job = _submit(ctx, cmd, asked.text, asked.user, asked.channel, asked.tagged, where,
                       asked.registered)
    if postable is not Postable.YES:  # after the store's commit, so settle sees these trials
        ctx.channels.confirm(asked.channel)
    if held:
        out = {**out, **reply(views.held_note(asked.channel) + "\n" + out["text"])}
    return Answer(out, job, asked.tagged, tuple(s.to_dict() for s in every), asked.route)


def _unrunnable(every: tuple[specs.TrialSpec, ...], asked: Asked) -> str | None:
    """Why no registered worker can run these trials (then nothing is queued), or None."""
    registered, route = asked.registered, asked.route
    if registered and route and not any(routing.matches(w["info"], route) for w in registered):
        return _no_match(route, registered, bool(asked.tagged and route.get("gpu")
                                                 and "gpu=" not in asked.text))

    def runnable(spec: specs.TrialSpec) -> bool:
        return any(workers.can_run(w["info"], dict(spec.to_dict(),
                                                   route=route)) for w in registered)

    for s in every:
        why = registered and s.workload in specs.HF and workers.hf_refusal(
            s.params, s.workload, [w for w in registered if routing.matches(w["info"], route)])
        if why:
            return _(":x: {why} Nothing was queued.", why=why)
    wide = next((s for s in every if not s.recipe and not runnable(s)), None)
    if registered and wide:
        have = "; ".join(_("{name}: {gpus} GPU(s), {cpus} cores", name=w["name"],
                           gpus=len(w["info"].get("gpus") or []),
                           cpus=w["info"].get("cpus", "?")) for w in registered)
        return _(":x: No worker can run `world={world}` ranks on device={device}: a rank "
                 "needs its own GPU (or CPU core). Workers: {have}. Use a smaller world, "
                 "or start a worker with enough GPUs. Nothing was queued.",
                 world=wide.params.get("world"), device=wide.params.get("device"), have=have)
    if every[0].recipe and not runnable(every[0]):
        return _(":x: No worker can run recipe `{recipe}`: it needs CUDA and every "
                 "worker with it in its recipe file has no NVIDIA GPU. Start a GPU worker "
                 "with that recipe file. Nothing was queued.", recipe=every[0].recipe)
    return None


def _no_match(route: Json, registered: list[Json], plan_target: bool) -> str:
    """No registered worker matches the route (`plan_target`: the plan's GPU, not a gpu=)."""
    note = gpus.unlisted_note(route.get("gpu"))
    return _no_match_text(route, registered, plan_target) + (f"\n{note}." if note else "")


def _no_match_text(route: Json, registered: list[Json], plan_target: bool) -> str:
    have = "\n".join(f"• {routing.worker_line(w)}" for w in registered)
    if plan_target:
        return _(":x: No worker matches `{route}` (the plan's target GPU; give "
                 "`gpu=OTHER` to run elsewhere, or `gpu=any` to run on any worker: a "
                 "trial measured off the target is kept as evidence, not counted in "
                 "the block's actual). Workers:\n{have}\nChange the constraint, or "
                 "start a worker that has it (`trialbot-worker --label KEY=VALUE`). "
                 "Nothing was queued.", route=routing.describe(route), have=have)
    return _(":x: No worker matches `{route}`. Workers:\n{have}\nChange the "
             "constraint, or start a worker that has it (`trialbot-worker --label "
             "KEY=VALUE`). Nothing was queued.", route=routing.describe(route), have=have)


def settle(ctx: Context, channel: str, refusal: str | None) -> int:
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


def _submit(ctx: Context, cmd: Command, text: str, user: str, channel: str, tagged: Json | None,
            where: Json, registered: list[Json]) -> tuple[Json, Json]:
    if cmd.name == "ladder":
        jobs = ctx.queue.submit_group("ladder", cmd.specs, cmd.words, user, channel, cmd.budget,
                                  tagged, **where)
        return also(ladder.queued(jobs, cmd.budget), _waiting(registered, jobs[0])), jobs[-1]
    if cmd.name == "ab":
        jobs = ctx.queue.submit_group("ab", cmd.specs, cmd.words, user, channel, tags=tagged,
                                      **where)
        return also(ab.queued(jobs), _waiting(registered, jobs[0])), jobs[-1]
    if cmd.name == "sweep":
        jobs = ctx.queue.submit_sweep(cmd.specs, cmd.words, user, channel, tagged, **where)
        # The last job stands for the sweep: its end posts the fit (one worker runs
        # them in order; with several, whichever ends last posts it).
        return views.sweep_queued(jobs, workers.online_for(registered, jobs[0]["spec"]),
                                  _waiting(registered, jobs[0])), jobs[-1]
    assert cmd.spec is not None  # run's parse gave its spec
    job = ctx.queue.submit(cmd.spec, parse.canonical(text.split(), cmd.spec), user, channel,
                           tagged, **where)
    return views.queued(job, workers.online_for(registered, job["spec"]),
                        _waiting(registered, job)), job


def _waiting(registered: list[Json], job: Json) -> str:
    """For a routed trial whose workers are all offline, the line naming them."""
    offline = workers.offline_for(registered, job["spec"])
    return views.waiting_for(job["spec"]["route"], offline, time.time()) if offline else ""


def also(answer: Json, line: str) -> Json:
    """The reply with `line` added at its end (none when empty)."""
    return {**answer, **reply(answer["text"] + "\n" + line)} if line else answer


def cancel(ctx: Context, job_id: int, user: str) -> str:
    """`/trial cancel T12` and the card's Cancel button: the trial's owner, or an
    admin. Returns what happened; raises ValueError naming why it cannot."""
    job = ctx.store.job(job_id)
    with ctx.queue.speaking(job["channel"] if job else None):  # a click has no command around it
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


CLICK_SECONDS = 30  # a user's clicks on one card within this are one click


def rerun(ctx: Context, job_id: int, user: str, request: str | None = None,
          response_url: str | None = None, card: str | None = None) -> Json:
    """The "Re-run" button: the same trial again, by whoever clicked, in its
    channel. `request` is the click's trigger_id (Slack's retries repeat it);
    `card` names the message clicked on: each click has a trigger_id of its own,
    so a double click is caught by card and user. Called after the click's ack
    (bot/slack/listeners/actions.py): it may wait for Slack's word on the channel."""
    old = ctx.store.job(job_id)
    with ctx.queue.speaking(old["channel"] if old else None):  # the card's channel's language
        try:
            return _rerun(ctx, job_id, old, user, request, response_url, card)
        except Unwritable as exc:
            return reply(_(":x: Nothing was queued: {why}.", why=unwritable_text(exc)))


def _rerun(ctx: Context, job_id: int, old: Json | None, user: str, request: str | None,
           response_url: str | None, card: str | None) -> Json:
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
        keys: list[tuple[str | None, float | None]] = [
            (request, None), (card and f"rerun:{card}:{user}", CLICK_SECONDS)]
        job = ctx.queue.submit(spec, old["words"], user, old["channel"], request=keys,
                           route=old["spec"].get("route"), response_url=response_url)
    except DuplicateRequest as exc:
        return reply(_("Already received: your click on this card queued T{id}; nothing new "
                       "was queued. To run it once more, click again after {seconds} s.",
                       id=exc.jobs[0], seconds=CLICK_SECONDS))
    return views.queued(job, workers.online_for(registered, job["spec"]),
                        _waiting(registered, job))


HELP_HEAD = (N_("*`/trial`* runs a measured trial on a worker and posts the report here."),
             N_("Usage: `{usage}`"))
# The options of every entry that runs (routing.take reads them before the table)
HELP_WHERE = N_("*Where*: add `gpu=H100`, `min_mem=80GB` or `label=team=nlp` to run only on a "
                "worker that has it (`/trial workers` lists what each has).")

TABLE: tuple[Entry, ...] = (
    Entry("help", parse.parse_help, _help),
    Entry("sweep", parse.parse_sweep_words, _queue, runs=True, usage=parse.SWEEP_USAGE, help=(N_(
        "*Sweeps*: `/trial sweep llm-infer batch=1,2,4,8 prompt=512` (or `/trial sweep "
        "recipe NAME batch=1,2,4`) runs one trial per config (comma lists on whole-number "
        "parameters, at most 16) and posts a scaling fit of peak memory and time; "
        "`/trial fit S12 batch=32 prompt=2048 gpu=H100` predicts a config and the largest "
        "batch that fits a GPU."),)),
    Entry("fit", parse.parse_fit_words, _fit, usage=parse.FIT_USAGE),
    Entry("run", parse.parse_run, _queue, runs=True, help=(N_(
        "*A model you cannot run yet*: `/trial llm-infer preset=llama-3-8b layers=2 "
        "batch=8 prompt=4096 gen=256 dtype=bf16` runs 2 of its 32 layers; the report "
        "predicts the full depth's peak, which GPUs hold it (margin, largest batch) and a "
        "decode-time model estimate per GPU. `/trial sweep llm-infer preset=llama-3-8b "
        "layers=1,2,4 ...` measures the per-layer part instead of assuming it."), N_(
        "*A Hugging Face model's own code*: `/trial hf-infer model=mistral-7b layers=2 "
        "dtype=bf16` builds it with transformers from its config (random weights, nothing "
        "downloaded) and predicts the full depth the same way; `model=` also takes a "
        "config in a worker's `--models` directory. `hf-train` trains it, and `/trial "
        "ladder hf-train model=NAME ...` climbs the ladder."))),
    Entry("ladder", parse.parse_ladder, _queue, runs=True, usage=ladder.USAGE, help=(N_(
        "*Ladder*: `/trial ladder llm-train batch=8 seq=512 [precision=bf16] [world=2] "
        "[budget=24GB]` runs the baseline, then lower precision, then activation "
        "checkpointing, then ZeRO-1, each on top of the previous, and posts one table with "
        "the loss check and a recommendation. `/trial ab llm-infer dtype=fp32,bf16 "
        "[rounds=4]` runs A, B, B, A, A, B, B, A and compares time (a verdict only beyond the "
        "noise), memory and quality (logits, or the loss)."),)),
    Entry("ab", parse.parse_ab, _queue, runs=True, usage=ab.USAGE),  # in ladder's paragraph
    Entry("cancel", parse.parse_cancel, _cancel, usage="/trial cancel T12", help=(N_(
        "*Manage*: `/trial cancel T12` (yours, or anyone's for an admin) · "
        "`/trial list [mine|running|failed]` · `/trial workers` (GPUs, idle/busy/offline "
        "since, idle hours this week). The trial's message is edited in place as it runs "
        "and carries Cancel, Re-run and Add to plan… buttons."),)),
    # in cancel's paragraph, as are workers and status
    Entry("list", parse.parse_list, _list, usage="/trial list [mine|running|failed]"),
    Entry("workers", parse.parse_workers, _workers, usage="/trial workers"),
    Entry("status", parse.parse_status, _status, usage="/trial status T12"),
)
_NAMED = {e.name: e for e in TABLE if e.name != "run"}  # run: a workload's name comes first
RUN = next(e for e in TABLE if e.name == "run")
_KEYWORDS = {*_NAMED, "recipe", *specs.WORKLOADS}
# `/trial help TOPIC`: each sub-command (its paragraphs) and where; workloads besides
TOPICS = (*(e.name for e in TABLE if e.name not in ("help", "run")), "where")
