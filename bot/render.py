"""Replies and messages as Slack payloads (`text` + Block Kit `blocks`).
Pure: the same payload goes to Slack, to the console, and to `--json`."""
from __future__ import annotations

from worker import spec as specs
from worker import summary
from worker.summary import secs


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def reply(text: str) -> dict:
    """An ephemeral answer to the person who typed the command."""
    return {"response_type": "ephemeral", "text": text, "blocks": [_section(text)]}


def error(exc: specs.SpecError) -> dict:
    return reply(f":x: {exc.message}\nUsage: `{exc.usage}` (`/trial help` lists every "
                 "parameter)\nNothing was queued.")


def help_text(recipes: dict | None = None) -> str:
    lines = ["*`/trial`* runs a measured trial on a worker and posts the report here.",
             f"Usage: `{specs.general_usage()}`", ""]
    for w in [*specs.WORKLOADS.values(), *(recipes or {}).values()]:
        lines.append(f"*{'recipe ' if w.recipe else ''}{w.name}*: {w.summary}"
                     + (" (needs CUDA)" if w.requires == "cuda" else ""))
        lines += [f"• `{p.name}={p.default}` {p.help} ({p.allowed()})" for p in w.params]
    if not recipes:
        lines.append("_No recipes: a worker started with `--recipes FILE` adds its own._")
    lines.append("Example: `/trial llm-infer batch=4 prompt=512 gen=64 dtype=bf16`")
    return "\n".join(lines)


def queued(job: dict, workers: list[str]) -> dict:
    if workers:
        where = f"next free worker ({len(workers)} online: {', '.join(workers)})"
    else:
        where = ("next free worker that can run it — none is online now; start one with "
                 "`trialbot-worker --server URL --token TOKEN`"
                 + (" `--recipes FILE` (with an NVIDIA GPU if the recipe needs CUDA)"
                    if job["spec"].get("recipe") else ""))
    return reply(f"Queued as *{job['trial']}* on {where}: `{job['words']}`\n"
                 f"The report will be posted in this channel. `/trial status {job['trial']}`")


def status(job: dict, attempts: list[dict] | None = None) -> dict:
    lines = [f"*{job['trial']}* `{job['words']}` — *{job['status']}*"
             + (f" on {job['worker']}" if job.get("worker") else "")]
    for a in attempts or []:
        what = a["error_class"] or a["status"]
        lines.append(f"• try {a['n']} on {a['worker']}: {what}, {secs(a['seconds'])}"
                     + (f" — {a['message'].strip().splitlines()[-1]}"
                        if a["error_class"] and a["message"].strip() else "")
                     + (f"; then {a['next']}" if a["next"] else ""))
    if job.get("report"):
        lines.append(summary.text(job["report"]))
    return reply("\n".join(lines))


def job_list(jobs: list[dict]) -> dict:
    if not jobs:
        return reply("No trials yet. Try `/trial llm-infer` or `/trial help`.")
    lines = ["Recent trials:"]
    for j in jobs:
        r = j.get("report")
        headline = ""
        if r and r["status"] == "ok" and r.get("latency"):
            headline = f" · p90 {secs(r['latency']['p90'])}"
        elif r and r.get("error"):
            headline = f" · {r['error']['class']}"
        where = f" on {j['worker']}" if j.get("worker") else ""
        lines.append(f"• *{j['trial']}* {j['status']}{where} `{j['words']}`{headline}")
    return reply("\n".join(lines))


def started(job: dict, worker: str) -> dict:
    text = f"*{job['trial']}* started on *{worker}*: `{job['words']}` (by <@{job['user']}>)"
    return {"channel": job["channel"], "kind": "started", "text": text,
            "blocks": [_section(text)]}


def report(job: dict, r: dict) -> dict:
    """The posted report, threaded under the job's "started" message."""
    return {"channel": job["channel"], "kind": "report", "thread_of": job.get("started_msg"),
            "text": summary.text(r), "blocks": report_blocks(r)}


def chart(job: dict, r: dict) -> dict:
    """The memory timeline PNG, uploaded into the trial's thread (drawn at send time
    from the stored report, so the outbox row holds no image)."""
    return {"channel": job["channel"], "kind": "chart", "thread_of": job.get("started_msg"),
            "text": f"{job['trial']} memory over time: sampled series, phases shaded",
            "file": f"{job['trial']}-memory.png"}


def report_blocks(r: dict) -> list[dict]:
    icon = ":white_check_mark:" if r["status"] == "ok" else ":x:"
    blocks = [_section(f"{icon} {summary.headline(r)}")]
    if summary.retry_line(r):
        blocks.append(_section(f":warning: {summary.retry_line(r)}"))
    if r["status"] == "failed":
        err = r["error"]
        tail = "\n".join(err["message"].strip().splitlines()[-6:])
        blocks.append(_section(f"*{err['class']}* in phase `{err.get('phase')}`:\n```{tail}```"))
    fields = [f"*{label[0].upper()}{label[1:]}*\n{value}" for label, value in summary.facts(r)]
    blocks.append({"type": "section",
                   "fields": [{"type": "mrkdwn", "text": f} for f in fields[:10]]})
    blocks.append(_context(summary.phases_line(r)))
    blocks.append(_context(summary.env_line(r)))
    return blocks
