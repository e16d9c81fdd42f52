"""Replies to `/trial` and the messages a trial posts: queued, status, list,
help, the threaded report and its chart. Pure: payloads only."""
from __future__ import annotations

from bot.blocks import context, reply, section
from bot.fits import depth, depthview
from bot.states import JobStatus, Json, Outcome
from bot.trials import routing, workerlist
from bot.trials.job import ENDED
from worker.api import Report, Workload, duration, specs, summary
from worker.i18n import N_, _, pgettext

# A job's status as shown; the stored word stays English (`/trial list running` takes it).
STATUS: dict[str, str] = {
    JobStatus.HELD: N_("held for Slack's answer"), JobStatus.QUEUED: N_("queued"),
    JobStatus.RUNNING: N_("running"), JobStatus.DONE: N_("done"),
    JobStatus.FAILED: N_("failed"), JobStatus.CANCELLED: N_("cancelled")}


def status_word(status: str) -> str:
    return _(STATUS[status]) if status in STATUS else status


def error(exc: specs.SpecError) -> Json:
    return reply(_(":x: {message}\nUsage: `{usage}` (`/trial help llm-infer` lists a workload's "
                   "parameters)\nNothing was queued.", message=exc.message, usage=exc.usage))


def help_text(paragraphs: list[str], recipes: Json | None, topics: tuple[str, ...]) -> str:
    """`/trial help`: the command table's paragraphs (bot/trials/command.py), each
    workload in a line, the recipes by name, and the topics `/trial help TOPIC` shows."""
    lines = [*paragraphs, "", _("*Workloads*: `/trial help WORKLOAD` lists one's parameters "
                                "with their defaults and ranges")]
    lines += [f"• {_workload_line(w)}" for w in specs.WORKLOADS.values()]
    if recipes:
        lines.append(_("• *recipe NAME*: {names} (`/trial help recipe NAME` lists one's "
                       "parameters)", names=", ".join(f"`{r}`" for r in sorted(recipes))))
    else:
        lines.append(_("_No recipes: a worker started with `--recipes FILE` adds its own._"))
    lines.append(_("*More*: {topics}", topics=" · ".join(f"`/trial help {t}`" for t in topics)))
    lines.append(_("Example: `/trial llm-infer batch=4 prompt=512 gen=64 dtype=bf16`"))
    return "\n".join(lines)


def _workload_line(w: Workload) -> str:
    name = f"recipe {w.name}" if w.recipe else w.name  # `recipe` is the command's word
    return (_("*{name}*: {summary} (needs CUDA)", name=name, summary=w.summary_text())
            if w.requires == "cuda" else f"*{name}*: {w.summary_text()}")


def workload_help(w: Workload) -> str:
    """`/trial help llm-infer` (or `recipe NAME`): every parameter with its default and range."""
    lines = [_workload_line(w)]
    lines += [f"• `{p.name}={p.default}` {p.help_text()} ({p.allowed()})" for p in w.params]
    lines.append(_("Usage: `{usage}`", usage=w.usage()))
    return "\n".join(lines)


# `/trial help TOPIC`'s own paragraph: what the sub-command does, its parameters,
# an example; then the general help's paragraphs that use it, and its usage.
TOPIC_HELP = {
    "sweep": N_("*`/trial sweep`* queues one trial per config, the product of the comma lists "
                "you give, and when the last one ends posts a scaling fit of peak memory and "
                "time. Parameters: the workload's, as for one trial (`/trial help llm-infer`); "
                "a comma list on a whole-number parameter (`batch`, `prompt`, `gen`; `layers` "
                "alone makes a depth sweep), at most {most} trials in all; `gpu=`, `min_mem=` "
                "and `label=` choose the worker (`/trial help where`). Example: `/trial sweep "
                "llm-infer batch=1,2,4,8 prompt=512`."),
    "fit": N_("*`/trial fit`* asks a finished sweep's fit about a config it did not run: the "
              "predicted peak memory and time, and with `gpu=` whether it fits that GPU and the "
              "largest batch that does. Parameters: the sweep's id (`S12`, in its messages), "
              "the swept parameters at the values to predict (`batch=`, `prompt=`, `gen=`; "
              "`layers=` for a depth sweep), `gpu=` a GPU name. Example: `/trial fit S12 "
              "batch=32 prompt=2048 gpu=H100`."),
    "ladder": N_("*`/trial ladder`* trains a model four times, each step on top of the one "
                 "before: the fp32 baseline, lower precision, activation checkpointing, then "
                 "ZeRO-1 over ranks, and posts one table with each step's memory and time, the "
                 "loss check and a recommendation. Parameters: the training workload's (`/trial "
                 "help llm-train`, `/trial help hf-train`); `precision=` the lower precision "
                 "(default `bf16`), `world=` the ranks of the ZeRO-1 step (default `2`), "
                 "`budget=` the memory a step must fit in. Example: `/trial ladder llm-train "
                 "batch=8 seq=512 budget=24GB`."),
    "ab": N_("*`/trial ab`* runs a workload as A and as B, two values of one parameter, in "
             "rounds of one each (A B, then B A, so a drift cancels), and compares time (a "
             "verdict only beyond the noise), memory and quality (the logits, or the loss). "
             "Parameters: the workload's, one of them with two comma values; `rounds=` from 1 "
             "to {rounds_most} (default {rounds}). Example: `/trial ab llm-infer "
             "dtype=fp32,bf16 batch=8`."),
    "cancel": N_("*`/trial cancel`* stops a trial that is queued or running: a queued one "
                 "never starts, a running one is stopped by its worker; either ends as "
                 "cancelled. Yours, or anyone's for an admin. Parameter: the trial's id (`T12`, "
                 "in its message or `/trial list`). Example: `/trial cancel T12`."),
    "list": N_("*`/trial list`* lists this channel's latest 15 trials, newest first, with "
               "their state. Parameter, if any: a filter, `mine` (yours), `running` (queued "
               "or running) or `failed` (failed or cancelled). Example: `/trial list "
               "failed`."),
    "workers": N_("*`/trial workers`* lists the workers that registered with this bot: each "
                  "one's GPUs, whether it is idle, busy or offline and since when, and its "
                  "idle hours this week. It takes no parameters. Example: `/trial workers`."),
    "status": N_("*`/trial status`* shows one trial: its command, its state and worker, each "
                 "try with its outcome and seconds, and its report once it has one; a trial of "
                 "another channel only to an admin. Parameter: the trial's id (`T12`, in its "
                 "message or `/trial list`). Example: `/trial status T12`."),
    "where": N_("*Where a trial runs*: `gpu=NAME` only on a worker with that GPU, `min_mem=80GB` "
                "on one with at least that much memory per GPU, `label=KEY=VALUE` on one "
                "started with `--label KEY=VALUE`. They go with any command that runs trials "
                "(one, `sweep`, `ladder`, `ab`); `/trial workers` lists what each worker has. "
                "Example: `/trial llm-infer batch=8 gpu=H100`."),
}


def topic_help(paragraphs: list[str], usage: str) -> str:
    """`/trial help sweep`: the paragraphs that use the sub-command, and its usage."""
    return "\n".join([*paragraphs, _("Usage: `{usage}`", usage=usage)])


def held_note(channel: str) -> str:
    """The first line of a reply whose trials wait (held) for Slack to say the
    bot may post in the channel, which it is asked once the reply is sent."""
    return _(":hourglass_flowing_sand: Held until Slack confirms I may post in <#{channel}> "
             "(a second or two); then queued as below. If I may not, you are told here and "
             "nothing runs.", channel=channel)


def waiting_for(route: Json, offline: list[Json], now: float) -> str:
    """A routed trial whose workers are all offline: which it waits for, and
    when each was last seen."""
    names = "; ".join(f"*{w['name']}*, {workerlist.offline(w['last_seen'], now)}"
                      for w in offline)
    return _(":hourglass: It waits for a worker that matches `{route}`, and none is online "
             "now: {workers}. It starts when one of them is back (`/trial workers` shows "
             "them).", route=routing.describe(route), workers=names)


def queued(job: Json, workers: list[str], waiting: str = "") -> Json:
    """The reply to a queued trial: the online workers that can run it, or
    `waiting` (waiting_for's line), or how to start a worker."""
    values = {"trial": job["trial"], "words": job["words"]}
    if workers:
        text = _("Queued as *{trial}* on next free worker ({n} online: {names}): `{words}`",
                 n=len(workers), names=", ".join(workers), **values)
    elif waiting:
        text = _("Queued as *{trial}*: `{words}`", **values) + "\n" + waiting
    elif job["spec"].get("recipe"):
        text = _("Queued as *{trial}* on next free worker that can run it — none is online now; "
                 "start one with `trialbot-worker --server URL --token TOKEN` `--recipes FILE` "
                 "(with an NVIDIA GPU if the recipe needs CUDA): `{words}`", **values)
    else:
        text = _("Queued as *{trial}* on next free worker that can run it — none is online now; "
                 "start one with `trialbot-worker --server URL --token TOKEN`: `{words}`",
                 **values)
    text += "\n" + _("The report will be posted in this channel. `/trial status {trial}`",
                     trial=job["trial"])
    if job.get("plan"):
        text += "\n" + _("It counts as an actual of plan *{plan}*, {block} block "
                         "(`/plan {plan} review`).", plan=job["plan"], block=job["block"])
    return reply(text)


def status(job: Json, attempts: list[Json] | None = None) -> Json:
    values = {"trial": job["trial"], "words": job["words"], "status": status_word(job["status"])}
    lines = [_("*{trial}* `{words}` — *{status}* on {worker}", worker=job["worker"], **values)
             if job.get("worker") else _("*{trial}* `{words}` — *{status}*", **values)]
    for a in attempts or []:
        what = a["error_class"] or (pgettext("a try's outcome", "ok") if a["status"] == "ok"
                                    else a["status"])
        lines.append(_("• try {n} on {worker}: {what}, {seconds}", n=a["n"], worker=a["worker"],
                       what=what, seconds=duration(a["seconds"], measured=True))
                     + (f" — {a['message'].strip().splitlines()[-1]}"
                        if a["error_class"] and a["message"].strip() else "")
                     + (_("; then {next}", next=a["next"]) if a["next"] else ""))
    if job.get("report"):
        lines.append(summary.text(job["report"]))
    return reply("\n".join(lines))


# `/trial list`'s filters (parse.LIST_FILTERS): each answer a sentence of its own.
NONE_LISTED = {None: N_("No trials yet. Try `/trial llm-infer` or `/trial help`."),
               "mine": N_("No mine trials in this channel."),
               "running": N_("No running trials in this channel."),
               "failed": N_("No failed trials in this channel.")}
LISTED = {None: N_("Recent trials:"), "mine": N_("Recent mine trials:"),
          "running": N_("Recent running trials:"), "failed": N_("Recent failed trials:")}


def job_list(jobs: list[Json], which: str | None = None) -> Json:
    if not jobs:
        return reply(_(NONE_LISTED[which]))
    lines = [_(LISTED[which])]
    for j in jobs:
        r = j.get("report")
        headline = ""
        if r and r["status"] == Outcome.OK.value and r.get("latency"):
            headline = f" · p90 {duration(r['latency']['p90'], measured=True)}"
        elif r and r.get("error"):
            headline = f" · {r['error']['class']}"
        values = {"trial": j["trial"], "status": status_word(j["status"]), "words": j["words"]}
        line = (_("• *{trial}* {status} on {worker} `{words}`", worker=j["worker"], **values)
                if j.get("worker") else _("• *{trial}* {status} `{words}`", **values))
        lines.append(line + headline)
    return reply("\n".join(lines))


def report(job: Json, r: Report) -> Json:
    """The posted report, threaded under the job's "started" message."""
    pred = depth.from_trial(r)
    text = summary.text(r) + (f"\n{depthview.trial_plain(pred)}" if pred else "")
    return {"channel": job["channel"], "kind": "report", "thread_of": job.get("started_msg"),
            "text": text, "blocks": report_blocks(r, pred)}


def chart(job: Json, r: Report) -> Json:
    """The memory timeline PNG, uploaded into the trial's thread (drawn at send time
    from the stored report, so the outbox row holds no image)."""
    return {"channel": job["channel"], "kind": "chart", "thread_of": job.get("started_msg"),
            "text": _("{trial} memory over time: sampled series, phases shaded",
                      trial=job["trial"]),
            "file": f"{job['trial']}-memory.png"}


def report_blocks(r: Report, pred: Json | None = None) -> list[Json]:
    """`pred`: the report's partial-depth prediction (bot/depth.from_trial), worked
    out here when the caller has not (a report without one returns at once)."""
    icon = ":white_check_mark:" if r["status"] == Outcome.OK.value else ":x:"
    blocks = [section(f"{icon} {summary.headline(r)}")]
    if summary.retry_line(r):
        blocks.append(section(f":warning: {summary.retry_line(r)}"))
    if summary.busy_line(r):
        blocks.append(section(f":warning: {summary.busy_line(r)}"))
    err = r.get("error")
    if r["status"] == Outcome.FAILED.value and err:  # a failed report names its error (validated)
        lines = err["message"].strip().splitlines()
        # An environment error leads with what to change and the resolver's lines.
        tail = "\n".join(lines[:12] if err["class"] == "environment" else lines[-6:])
        blocks.append(section(_("*{error}* in phase `{phase}`:\n```{tail}```",
                                error=err["class"], phase=err.get("phase"), tail=tail)))
    fields = [f"*{label[0].upper()}{label[1:]}*\n{value}" for label, value in summary.facts(r)]
    blocks.append({"type": "section",
                   "fields": [{"type": "mrkdwn", "text": f} for f in fields[:10]]})
    pred = pred or depth.from_trial(r)
    if pred:
        blocks += depthview.trial_blocks(pred)
    blocks.append(context(summary.phases_line(r)))
    blocks.append(context(summary.env_line(r)))
    return blocks


def sweep_queued(jobs: list[Json], workers: list[str], waiting: str = "") -> Json:
    first, last = jobs[0], jobs[-1]
    values = {"id": first["sweep"], "first": first["trial"], "last": last["trial"],
              "n": len(jobs), "configs": ", ".join(f"`{j['words']}`" for j in jobs)}
    if workers:
        text = _("Queued sweep *S{id}*: {first}–{last} ({n} trials) on next free workers "
                 "({online} online: {names}): {configs}", online=len(workers),
                 names=", ".join(workers), **values)
    elif waiting:
        text = _("Queued sweep *S{id}*: {first}–{last} ({n} trials): {configs}",
                 **values) + "\n" + waiting
    else:
        text = _("Queued sweep *S{id}*: {first}–{last} ({n} trials) on the next free worker "
                 "that can run them — none is online now; start one with `trialbot-worker "
                 "--server URL --token TOKEN`: {configs}", **values)
    # What this sweep's fit answers: a depth sweep takes layers=N, and refuses batch=.
    if depth.is_depth_sweep([j["spec"] for j in jobs]):
        then = _("Each report is posted here; when the last one ends, the depth fit is posted "
                 "too. Then `/trial fit S{id} layers=N gpu=H100` predicts a depth's memory and "
                 "time and whether it fits a GPU.", id=first["sweep"])
    else:
        then = _("Each report is posted here; when the last one ends, the scaling fit is posted "
                 "too. Then `/trial fit S{id} batch=N gpu=H100` predicts a config and the "
                 "largest batch for a GPU.", id=first["sweep"])
    return reply(f"{text}\n{then}")


def sweep_not_found(sweep: int) -> Json:
    return reply(_(":x: There is no sweep S{id}. A sweep's id is in the reply to `/trial "
                   "sweep` (S and its first trial's number); `/trial list` shows recent "
                   "trials. Nothing was queued.", id=sweep))


def sweep_unfinished(sweep: int, jobs: list[Json]) -> Json:
    waiting = [j for j in jobs if j["status"] not in ENDED]
    names = ", ".join(f"{j['trial']} ({status_word(j['status'])})" for j in waiting)
    return reply(_(":x: Sweep S{id} is not finished: {left} of {n} trials still to end: "
                   "{names}. Its fit is posted here when the last one ends; ask again then "
                   "(`/trial status {last}`).", id=sweep, left=len(waiting), n=len(jobs),
                   names=names, last=waiting[-1]["trial"]))
