"""`/trial`: what the command does, for every adapter (Slack, console).
Parse → act on the queue/store → a reply payload. Bad input creates nothing."""
from __future__ import annotations

from bot import commands, render
from bot.queue import JobQueue
from worker import spec as specs


def handle(queue: JobQueue, text: str, user: str, channel: str) -> tuple[dict, dict | None]:
    """Returns (ephemeral reply, the queued job or None)."""
    try:
        cmd = commands.parse_trial(text, queue.recipes())
    except specs.SpecError as exc:
        return render.error(exc), None
    if cmd.name == "help":
        return render.reply(render.help_text(queue.recipes())), None
    if cmd.name == "list":
        return render.job_list(queue.store.jobs(limit=15, channel=channel)), None
    if cmd.name == "status":
        job = queue.store.job(cmd.job_id)
        if job is None:
            return render.reply(f":x: There is no trial T{cmd.job_id}. `/trial list` shows "
                                "recent ones."), None
        return render.status(job, queue.store.attempts(job["id"])), None
    if cmd.spec.recipe and not queue.known_for(cmd.spec.to_dict()):
        return render.reply(f":x: No worker can run recipe `{cmd.spec.recipe}`: it needs CUDA "
                            "and every worker with it in its recipe file has no NVIDIA GPU. "
                            "Start a GPU worker with that recipe file. Nothing was queued."), None
    job = queue.submit(cmd.spec, " ".join(text.split()), user, channel)
    return render.queued(job, queue.online_for(job["spec"])), job


def handle_plan(text: str) -> dict:
    return render.reply("`/plan` (per-block GPU-hour estimates from measured trials) is not "
                        "available in this version yet; nothing was created. Measure first "
                        "with `/trial help`.")
