"""Replies to `/trial` and the messages a trial posts: queued, status, list,
help, the threaded report and its chart. Pure: payloads only."""
from __future__ import annotations

from bot.blocks import context, reply, section
from bot.fits import depth, depthview
from bot.trials.job import ENDED
from worker import spec as specs
from worker import summary
from worker.report import Report
from worker.units import duration


def error(exc: specs.SpecError) -> dict:
    return reply(f":x: {exc.message}\nUsage: `{exc.usage}` (`/trial help` lists every "
                 "parameter)\nNothing was queued.")


def help_text(recipes: dict | None = None) -> str:
    lines = ["*`/trial`* runs a measured trial on a worker and posts the report here.",
             f"Usage: `{specs.general_usage()}`",
             "*Sweeps*: `/trial sweep llm-infer batch=1,2,4,8 prompt=512` (or `/trial sweep "
             "recipe NAME batch=1,2,4`) runs one trial per config (comma lists on whole-number "
             "parameters, at most 16) and posts a scaling fit of peak memory and time; "
             "`/trial fit S12 batch=32 prompt=2048 gpu=H100` predicts a config and the largest "
             "batch that fits a GPU.",
             "*A model you cannot run yet*: `/trial llm-infer preset=llama-3-8b layers=2 "
             "batch=8 prompt=4096 gen=256 dtype=bf16` runs 2 of its 32 layers; the report "
             "predicts the full depth's peak, which GPUs hold it (margin, largest batch) and a "
             "decode-time model estimate per GPU. `/trial sweep llm-infer preset=llama-3-8b "
             "layers=1,2,4 ...` measures the per-layer part instead of assuming it.",
             "*A Hugging Face model's own code*: `/trial hf-infer model=mistral-7b layers=2 "
             "dtype=bf16` builds it with transformers from its config (random weights, nothing "
             "downloaded) and predicts the full depth the same way; `model=` also takes a "
             "config in a worker's `--models` directory. `hf-train` trains it, and `/trial "
             "ladder hf-train model=NAME ...` climbs the ladder.",
             "*Ladder*: `/trial ladder llm-train batch=8 seq=512 [precision=bf16] [world=2] "
             "[budget=24GB]` runs the baseline, then lower precision, then activation "
             "checkpointing, then ZeRO-1, each on top of the previous, and posts one table with "
             "the loss check and a recommendation. `/trial ab llm-infer dtype=fp32,bf16 "
             "[rounds=3]` runs A, B, A, B, A, B and compares time (a verdict only beyond the "
             "noise), memory and quality (logits, or the loss).",
             "*Where*: add `gpu=H100`, `min_mem=80GB` or `label=team=nlp` to run only on a "
             "worker that has it (`/trial workers` lists what each has).",
             "*Manage*: `/trial cancel T12` (yours, or anyone's for an admin) · "
             "`/trial list [mine|running|failed]` · `/trial workers` (GPUs, idle/busy/offline "
             "since, idle hours this week). The trial's message is edited in place as it runs "
             "and carries Cancel, Re-run and Add to plan… buttons.", ""]
    for w in [*specs.WORKLOADS.values(), *(recipes or {}).values()]:
        lines.append(f"*{'recipe ' if w.recipe else ''}{w.name}*: {w.summary_text()}"
                     + (" (needs CUDA)" if w.requires == "cuda" else ""))
        lines += [f"• `{p.name}={p.default}` {p.help_text()} ({p.allowed()})"
                  for p in w.params]
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
    actual = (f"\nIt counts as an actual of plan *{job['plan']}*, {job['block']} block "
              f"(`/plan {job['plan']} review`)." if job.get("plan") else "")
    return reply(f"Queued as *{job['trial']}* on {where}: `{job['words']}`\n"
                 f"The report will be posted in this channel. `/trial status {job['trial']}`"
                 + actual)


def status(job: dict, attempts: list[dict] | None = None) -> dict:
    lines = [f"*{job['trial']}* `{job['words']}` — *{job['status']}*"
             + (f" on {job['worker']}" if job.get("worker") else "")]
    for a in attempts or []:
        what = a["error_class"] or a["status"]
        lines.append(f"• try {a['n']} on {a['worker']}: {what}, {duration(a['seconds'])}"
                     + (f" — {a['message'].strip().splitlines()[-1]}"
                        if a["error_class"] and a["message"].strip() else "")
                     + (f"; then {a['next']}" if a["next"] else ""))
    if job.get("report"):
        lines.append(summary.text(job["report"]))
    return reply("\n".join(lines))


def job_list(jobs: list[dict], which: str | None = None) -> dict:
    if not jobs:
        return reply(f"No {which} trials in this channel." if which else
                     "No trials yet. Try `/trial llm-infer` or `/trial help`.")
    lines = [f"Recent {which + ' ' if which else ''}trials:"]
    for j in jobs:
        r = j.get("report")
        headline = ""
        if r and r["status"] == "ok" and r.get("latency"):
            headline = f" · p90 {duration(r['latency']['p90'])}"
        elif r and r.get("error"):
            headline = f" · {r['error']['class']}"
        where = f" on {j['worker']}" if j.get("worker") else ""
        lines.append(f"• *{j['trial']}* {j['status']}{where} `{j['words']}`{headline}")
    return reply("\n".join(lines))


def report(job: dict, r: Report) -> dict:
    """The posted report, threaded under the job's "started" message."""
    pred = depth.from_trial(r)
    text = summary.text(r) + (f"\n{depthview.trial_plain(pred)}" if pred else "")
    return {"channel": job["channel"], "kind": "report", "thread_of": job.get("started_msg"),
            "text": text, "blocks": report_blocks(r, pred)}


def chart(job: dict, r: Report) -> dict:
    """The memory timeline PNG, uploaded into the trial's thread (drawn at send time
    from the stored report, so the outbox row holds no image)."""
    return {"channel": job["channel"], "kind": "chart", "thread_of": job.get("started_msg"),
            "text": f"{job['trial']} memory over time: sampled series, phases shaded",
            "file": f"{job['trial']}-memory.png"}


def report_blocks(r: Report, pred: dict | None = None) -> list[dict]:
    """`pred`: the report's partial-depth prediction (bot/depth.from_trial), worked
    out here when the caller has not (a report without one returns at once)."""
    icon = ":white_check_mark:" if r["status"] == "ok" else ":x:"
    blocks = [section(f"{icon} {summary.headline(r)}")]
    if summary.retry_line(r):
        blocks.append(section(f":warning: {summary.retry_line(r)}"))
    if summary.busy_line(r):
        blocks.append(section(f":warning: {summary.busy_line(r)}"))
    if r["status"] == "failed":
        err = r["error"]
        tail = "\n".join(err["message"].strip().splitlines()[-6:])
        blocks.append(section(f"*{err['class']}* in phase `{err.get('phase')}`:\n```{tail}```"))
    fields = [f"*{label[0].upper()}{label[1:]}*\n{value}" for label, value in summary.facts(r)]
    blocks.append({"type": "section",
                   "fields": [{"type": "mrkdwn", "text": f} for f in fields[:10]]})
    pred = pred or depth.from_trial(r)
    if pred:
        blocks += depthview.trial_blocks(pred)
    blocks.append(context(summary.phases_line(r)))
    blocks.append(context(summary.env_line(r)))
    return blocks


def sweep_queued(jobs: list[dict], workers: list[str]) -> dict:
    first, last = jobs[0], jobs[-1]
    if workers:
        where = f"next free workers ({len(workers)} online: {', '.join(workers)})"
    else:
        where = ("the next free worker that can run them — none is online now; start one with "
                 "`trialbot-worker --server URL --token TOKEN`")
    configs = ", ".join(f"`{j['words']}`" for j in jobs)
    # What this sweep's fit answers: a depth sweep takes layers=N, and refuses batch=.
    if depth.is_depth_sweep([j["spec"] for j in jobs]):
        then = (f"the depth fit is posted too. Then `/trial fit S{first['sweep']} layers=N "
                "gpu=H100` predicts a depth's memory and time and whether it fits a GPU.")
    else:
        then = (f"the scaling fit is posted too. Then `/trial fit S{first['sweep']} batch=N "
                "gpu=H100` predicts a config and the largest batch for a GPU.")
    return reply(f"Queued sweep *S{first['sweep']}*: {first['trial']}–{last['trial']} "
                 f"({len(jobs)} trials) on {where}: {configs}\n"
                 f"Each report is posted here; when the last one ends, {then}")


def sweep_not_found(sweep: int) -> dict:
    return reply(f":x: There is no sweep S{sweep}. A sweep's id is in the reply to "
                 "`/trial sweep` (S and its first trial's number); `/trial list` shows recent "
                 "trials. Nothing was queued.")


def sweep_unfinished(sweep: int, jobs: list[dict]) -> dict:
    waiting = [j for j in jobs if j["status"] not in ENDED]
    names = ", ".join(f"{j['trial']} ({j['status']})" for j in waiting)
    return reply(f":x: Sweep S{sweep} is not finished: {len(waiting)} of {len(jobs)} trials "
                 f"still to end: {names}. Its fit is posted here when the last one ends; ask "
                 f"again then (`/trial status {waiting[-1]['trial']}`).")
