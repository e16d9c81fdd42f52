"""Replies and messages as Slack payloads (`text` + Block Kit `blocks`).
Pure: the same payload goes to Slack, to the console, and to `--json`."""
from __future__ import annotations

from bot.trials.job import ENDED
from worker import spec as specs
from worker import summary
from worker.summary import secs


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def table_text(rows: list[list]) -> str:
    """Rows as aligned columns, for a code block (Slack has no tables)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in rows)


def chunks(text: str, size: int = 2900) -> list[str]:
    """Section blocks hold 3000 characters; split on lines, keeping code fences whole."""
    out, cur = [], ""
    for line in text.split("\n"):
        if len(cur) + len(line) + 1 > size and cur:
            if cur.count("```") % 2:
                cur += "```"
                line = "```" + line
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    return out + [cur]


def reply(text: str) -> dict:
    """An ephemeral answer to the person who typed the command (split into
    sections: one holds 3,000 characters, and `/trial help` is longer)."""
    return {"response_type": "ephemeral", "text": text,
            "blocks": [_section(part) for part in chunks(text)]}


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
             "*Ladder*: `/trial ladder llm-train batch=8 seq=512 [precision=bf16] [world=2] "
             "[budget=24GB]` runs the baseline, then lower precision, then activation "
             "checkpointing, then ZeRO-1, each on top of the previous, and posts one table with "
             "the loss check and a recommendation. `/trial ab llm-infer dtype=fp32,bf16` "
             "runs A and B and compares time, memory and quality (logits, or the loss).",
             "*Where*: add `gpu=H100`, `min_mem=80GB` or `label=team=nlp` to run only on a "
             "worker that has it (`/trial workers` lists what each has).",
             "*Manage*: `/trial cancel T12` (yours, or anyone's for an admin) · "
             "`/trial list [mine|running|failed]` · `/trial workers` (GPUs, idle/busy/offline "
             "since, idle hours this week). The trial's message is edited in place as it runs "
             "and carries Cancel, Re-run and Add to plan… buttons.", ""]
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
        lines.append(f"• try {a['n']} on {a['worker']}: {what}, {secs(a['seconds'])}"
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
    from bot.fits import depth
    from bot.fits import depthview
    pred = depth.from_trial(r)
    text = summary.text(r) + (f"\n{depthview.trial_plain(pred)}" if pred else "")
    return {"channel": job["channel"], "kind": "report", "thread_of": job.get("started_msg"),
            "text": text, "blocks": report_blocks(r, pred)}


def chart(job: dict, r: dict) -> dict:
    """The memory timeline PNG, uploaded into the trial's thread (drawn at send time
    from the stored report, so the outbox row holds no image)."""
    return {"channel": job["channel"], "kind": "chart", "thread_of": job.get("started_msg"),
            "text": f"{job['trial']} memory over time: sampled series, phases shaded",
            "file": f"{job['trial']}-memory.png"}


def report_blocks(r: dict, pred: dict | None = None) -> list[dict]:
    """`pred`: the report's partial-depth prediction (bot/depth.from_trial), worked
    out here when the caller has not (a report without one returns at once)."""
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
    from bot.fits import depth
    from bot.fits import depthview
    pred = pred or depth.from_trial(r)
    if pred:
        blocks += depthview.trial_blocks(pred)
    blocks.append(_context(summary.phases_line(r)))
    blocks.append(_context(summary.env_line(r)))
    return blocks


# --- sweeps: `/trial sweep`, the posted scaling fit, `/trial fit` -----------------------

SWEEP_LEVEL = 0.90  # prediction intervals shown in sweep messages


def sweep_queued(jobs: list[dict], workers: list[str]) -> dict:
    first, last = jobs[0], jobs[-1]
    if workers:
        where = f"next free workers ({len(workers)} online: {', '.join(workers)})"
    else:
        where = ("the next free worker that can run them — none is online now; start one with "
                 "`trialbot-worker --server URL --token TOKEN`")
    configs = ", ".join(f"`{j['words']}`" for j in jobs)
    return reply(f"Queued sweep *S{first['sweep']}*: {first['trial']}–{last['trial']} "
                 f"({len(jobs)} trials) on {where}: {configs}\n"
                 "Each report is posted here; when the last one ends, the scaling fit is "
                 f"posted too. Then `/trial fit S{first['sweep']} batch=N gpu=H100` predicts "
                 "a config and the largest batch for a GPU.")


def sweep_fit(sweep: int, jobs: list[dict], fit: dict) -> dict:
    """The message posted to the channel when a sweep's last trial ended."""
    if fit.get("kind") == "depth":
        from bot.fits import depthview
        return depthview.sweep_fit(sweep, jobs, fit)
    parts = _sweep_parts(sweep, jobs, fit)
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": _plain(parts),
            "blocks": _sweep_blocks(parts)}


def sweep_fit_failed(sweep: int, jobs: list[dict], exc: Exception) -> dict:
    text = (f":x: *Sweep S{sweep}* ({jobs[0]['trial']}–{jobs[-1]['trial']}) ended, but its "
            f"fit failed: {type(exc).__name__}: {exc}. The trials' own reports stand; "
            f"`/trial fit S{sweep}` tries again.")
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": text,
            "blocks": [_section(text)]}


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


def sweep_answer(sweep: int, jobs: list[dict], fit: dict, params: dict, gpu=None) -> dict:
    """`/trial fit S12 batch=32 prompt=2048 gpu=H100`: a prediction for one
    config and the largest batch for a GPU, each with how it was measured."""
    from bot.fits import scaling
    if fit.get("kind") == "depth":
        from bot.fits import depthview
        return depthview.sweep_answer(sweep, jobs, fit, params.get("layers"), gpu)
    head = _sweep_head(sweep, jobs, fit)
    if fit.get("error"):
        return reply(f":x: {head}\nIt cannot be fitted: {fit['error']}.")
    if not params and gpu is None:
        parts = _sweep_parts(sweep, jobs, fit)
        return {"response_type": "ephemeral", "text": _plain(parts),
                "blocks": _sweep_blocks(parts)}
    lines = [head]
    if _partial_note(fit):
        lines.append(f":warning: {_partial_note(fit)}")
    vars_ = fit["variables"]
    if params:
        lines += _prediction_lines(fit, params, "")
    if gpu is not None:
        lengths = {k: v for k, v in params.items() if k != vars_["batch"]}
        lines.append(f"*Largest batch on {gpu.describe()}*")
        if gpu.note:
            lines.append(f"_{gpu.note}_")
        lines.append(_largest_line(scaling.largest_batch(fit, gpu.bytes, level=SWEEP_LEVEL,
                                                         **lengths), fit, lengths))
        if gpu.datasheet_gb is not None:
            lines.append("_The usable total of a real card differs (ECC, driver, firmware): "
                         "give `gpu=<size>GiB` from its nvidia-smi memory.total for an exact "
                         "answer._")
    return {"response_type": "ephemeral", "text": "\n".join(lines),
            "blocks": _sweep_blocks(lines)}


def _partial_note(fit: dict) -> str | None:
    """A batch sweep of a partial-depth preset fits the partial model."""
    from bot.fits import depth
    part = depth.partial({"workload": fit.get("workload"), "params": fit.get("defaults") or {},
                          "trial": "this sweep"})
    return (f"{part}: these fits are the partial model's, not the full depth's; a depth "
            "sweep (`layers=1,2,4`) predicts the full depth" if part else None)


def _plain(parts: list[str]) -> str:
    """The message's text: every paragraph, context lines without their marker."""
    return "\n".join(p[1:] if p.startswith("~") else p for p in parts)


def _sweep_blocks(parts: list[str]) -> list[dict]:
    blocks = []
    for part in parts:
        if len(blocks) >= 49:
            break
        blocks.append(_context(part[1:]) if part.startswith("~") else _section(part))
    return blocks


def _sweep_head(sweep: int, jobs: list[dict], fit: dict) -> str:
    what = f"recipe {fit['recipe']}" if fit.get("recipe") else (fit.get("workload") or "?")
    ok = sum(1 for j in jobs if j["status"] == "done")
    failed = sum(1 for j in jobs if j["status"] == "failed")
    vars_ = fit.get("variables") or {}
    axes = []
    if vars_.get("batch"):
        axes.append(f"b = {vars_['batch']}")
    if vars_.get("length"):
        axes.append(f"s = {'+'.join(vars_['length'])}")
    return (f":chart_with_upwards_trend: *Sweep S{sweep}* — {what}, {jobs[0]['trial']}–"
            f"{jobs[-1]['trial']}: {ok} ok, {failed} failed"
            + (f"; {', '.join(axes)}" if axes else ""))


def _sweep_parts(sweep: int, jobs: list[dict], fit: dict) -> list[str]:
    """The fit as a list of paragraphs; one starting with `~` is a context line."""
    parts = [_sweep_head(sweep, jobs, fit)]
    parts.append(_points_table(fit))
    if fit.get("failed"):
        parts.append("*Failed, excluded from the fit:* " + "; ".join(
            f"{f['trial']} ({_params(f['params'])}): {f['error_class']}"
            + (f" — {f['message']}" if f.get("message") else "") for f in fit["failed"]))
    if fit.get("oom"):
        o = fit["oom"]
        parts.append(f"*Out of memory* is information too: largest OK batch "
                     f"{o['largest_ok_batch']}, smallest OOM batch {o['smallest_oom_batch']} "
                     f"(on the worker that ran them).")
    if fit.get("error"):
        parts.append(f":x: No fit: {fit['error']}.")
        return parts
    for method, model in fit["memory"].items():
        parts.append(_model_text(f"Peak memory — {method}", model, fit))
    if fit.get("time"):
        parts.append(_model_text("Time per request" if fit["workload"] == "llm-infer"
                                 else "Time of the run phase", fit["time"], fit))
    if fit.get("arithmetic"):
        parts.append(_arithmetic_text(fit))
    vars_, points = fit["variables"], fit["points"]
    if vars_.get("batch") and points:
        top = max(points, key=lambda p: (p["params"].get(vars_["batch"], 0), p["s"]))
        lengths = {k: top["params"][k] for k in vars_["length"] if k in top["params"]}
        for factor in (2, 4):
            q = {vars_["batch"]: factor * top["params"][vars_["batch"]], **lengths}
            parts.append("\n".join(_prediction_lines(fit, q, f" ({factor}× the largest batch)")))
    parts.append(_gpu_text(fit, sweep))
    for note in [*(fit.get("notes") or []), _partial_note(fit)]:
        if note:
            parts.append(f":warning: {note}")
    parts.append(f"~How: ordinary least squares per memory method (never mixed) and for time; "
                 f"the terms are chosen by what the sweep varied, a richer one only when "
                 f"leave-one-out error shows it. ± is a {SWEEP_LEVEL:.0%} prediction interval "
                 f"for a new trial from the residuals (Student t, dof = points − terms); dof 1 "
                 f"is a weak check: add points. A held-out error refits without the largest "
                 f"config and predicts it. Ask `/trial fit S{sweep} batch=N gpu=H100`.")
    return [p for p in parts if p]


def _params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def _points_table(fit: dict) -> str:
    points = fit.get("points") or []
    if not points:
        return ""
    methods = [m for m in (fit.get("memory") or {})] or [
        m for m in ("process_used_peak", "peak_reserved", "peak_allocated", "host_rss_peak")
        if any(p["memory"].get(m) is not None for p in points)]
    keys = list(points[0]["params"])
    head = ["trial", *keys, *[_SHORT.get(m, m) for m in methods], "time"]
    rows = [head]
    for p in points:
        rows.append([p["trial"] or "?", *[str(p["params"].get(k)) for k in keys],
                     *[_bytes(p["memory"].get(m)) for m in methods],
                     _secs(p["seconds"]) + (" (retried)" if p.get("retried") else "")])
    table = table_text(rows)
    return f"*Measured points* (memory peaks; time = {_time_what(fit)}):\n```{table}```"


_SHORT = {"process_used_peak": "NVML proc", "peak_reserved": "reserved",
          "peak_allocated": "allocated", "host_rss_peak": "host RSS"}


def _time_what(fit: dict) -> str:
    t = fit.get("time") or {}
    return t.get("what") or ("mean latency per request" if fit.get("workload") == "llm-infer"
                             else "run phase seconds")


def _bytes(n) -> str:
    if n is None:
        return "n/a"
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{sign}{n / size:.3g} {unit}" if n / size < 100 else \
                f"{sign}{n / size:.0f} {unit}"
    return f"{sign}{n:.3g} B" if n >= 1 else "0 B"


def _secs(x) -> str:
    if x is None:
        return "n/a"
    sign, x = ("-" if x < 0 else ""), abs(x)
    if x >= 1:
        return f"{sign}{x:.3g} s"
    if x >= 1e-3:
        return f"{sign}{x * 1e3:.3g} ms"
    if x >= 1e-6:
        return f"{sign}{x * 1e6:.3g} µs"
    return f"{sign}{x * 1e9:.3g} ns" if x >= 1e-9 else "0 s"


_TERM = {"1": "", "b": "·b", "s": "·s", "s^2": "·s²", "b*s": "·b·s", "b*s^2": "·b·s²"}


def _formula(model: dict) -> str:
    fmt = _bytes if model["unit"] == "bytes" else _secs
    out = []
    for i, (feature, c) in enumerate(zip(model["features"], model["coef"])):
        sign = ("−" if c < 0 else "") if i == 0 else (" − " if c < 0 else " + ")
        out.append(sign + fmt(abs(c)) + _TERM[feature])
    return "".join(out)


def _model_text(title: str, model: dict, fit: dict) -> str:
    if model.get("error"):
        return f"*{title}*: no fit — {model['error']}"
    fmt = _bytes if model["unit"] == "bytes" else _secs
    lines = [f"*{title}* ({model['what']}):",
             f"≈ {_formula(model)}  _(terms: {', '.join(model['features'])}; {model['why']})_"]
    check = []
    if model["residual_sd"] is not None:
        check.append(f"residual sd {fmt(model['residual_sd'])} on {model['dof']} dof")
    else:
        check.append(f"{model['n']} points, {len(model['features'])} terms: an exact line, no "
                     "residual to check it")
    held = model.get("held_out")
    if held:
        err = held["relative_error"]
        check.append(f"held out {held['trial']} (b={held['b']:g}, s={held['s']:g}): predicted "
                     f"{fmt(held['predicted'])}, measured {fmt(held['measured'])}, error "
                     + (f"{err:+.1%}" if err is not None else "n/a"))
    else:
        check.append(f"held-out error cannot be computed: {model['held_out_why']}")
    if model.get("loo"):
        check.append(f"leave-one-out max {model['loo']['max_relative']:.1%} over "
                     f"{model['loo']['count']} points")
    if model.get("missing"):
        check.append(f"{model['missing']} trial(s) had no {model['target']} figure")
    lines.append("; ".join(check))
    if model["target"] == "host_rss_peak" and fit["defaults"].get("malloc") != "live":
        lines.append("_Host RSS also counts memory the C allocator kept after frees (glibc keeps "
                     "freed blocks under its mmap threshold, at most 32 MiB each), so growth "
                     "measured at small batches can overstate large ones by 10–20%; sweep "
                     "with malloc=live for the live peak._")
    return "\n".join(lines)


def _per_token_slope(model: dict, fit: dict) -> float | None:
    """Bytes per (sequence × position): the b·s coefficient, or b's over s."""
    coef = dict(zip(model["features"], model["coef"]))
    if "b*s" in coef:
        return coef["b*s"]
    if "b" in coef and set(coef) <= {"1", "b"}:
        s = model["range"]["s"][0]
        return coef["b"] / s if s else None
    return None


def _arithmetic_text(fit: dict) -> str:
    a, d = fit["arithmetic"], fit["defaults"]
    parts = a["parts"]
    lines = [f"*From the architecture* (exact, {a['dtype']} = {a['dtype_bytes']} B): weights "
             f"{a['weight_params']:,} params = {_bytes(a['weight_bytes'])} (embedding "
             f"{parts['embedding']:,} and lm head {parts['lm_head']:,}, not tied; "
             f"layers {d['layers']} × {parts['layers'] // d['layers']:,}; final norm "
             f"{parts['final_norm']:,}); "
             f"KV cache {a['kv_formula']} = {_bytes(a['kv_bytes_per_token'])} per token"]
    for method, model in fit["memory"].items():
        if model.get("error"):
            continue
        slope = _per_token_slope(model, fit)
        coef = dict(zip(model["features"], model["coef"]))
        bits = []
        if slope is not None and a["kv_bytes_per_token"]:
            ratio = slope / a["kv_bytes_per_token"]
            bits.append(f"fitted {_bytes(slope)} per token = {ratio:.2f}× the KV cache's")
        if "1" in coef:
            bits.append(f"fixed term {_bytes(coef['1'])} vs weights {_bytes(a['weight_bytes'])}")
        if bits:
            lines.append(f"• {method}: " + "; ".join(bits))
    lines.append("_Above the KV cache per token: activations and workspace (prefill grows with "
                 "batch·prompt); above the weights: the runtime (host RSS: Python + torch "
                 "libraries, ~250 MB; GPU: the allocator's cache, the CUDA context)._")
    return "\n".join(lines)


def _prediction_lines(fit: dict, params: dict, why: str) -> list[str]:
    from bot.fits import scaling
    axes = [k for k in (fit["variables"]["batch"], *fit["variables"]["length"]) if k]
    merged = {**fit["defaults"], **params}
    shown = {**{k: merged[k] for k in axes if k in merged},
             **{k: v for k, v in params.items() if k not in axes}}
    lines = [f"*Predicted at {_params(shown)}*{why}:"]
    targets = [(m, lambda m=m: scaling.predict_memory(fit, m, params), _bytes)
               for m in fit["memory"]]
    if fit.get("time"):
        targets.append(("time", lambda: scaling.predict_seconds(fit, params), _secs))
    for name, predict, fmt in targets:
        try:
            value, se, dof = predict()
        except ValueError as exc:
            lines.append(f"• {name}: cannot say — {exc}")
            continue
        band = scaling.interval(value, se, dof, SWEEP_LEVEL)
        spread = (f" ± {fmt((band[1] - band[0]) / 2)} ({SWEEP_LEVEL:.0%} PI, dof {dof})" if band
                  else " (no interval: 2 points, dof 0)")
        lines.append(f"• {name}: {fmt(value)}{spread}{_extrapolation(fit, name, params)}")
    return lines


def _extrapolation(fit: dict, name: str, params: dict) -> str:
    model = fit["time"] if name == "time" else fit["memory"].get(name)
    batch = fit["variables"]["batch"]
    if not model or model.get("error") or not batch or batch not in params:
        return ""
    top = model["range"]["b"][1]
    if params[batch] > top:
        return (f" — extrapolated {params[batch] / top:.3g}× past the largest measured batch "
                f"{top:g}")
    return ""


def _largest_line(ans: dict, fit: dict, lengths: dict) -> str:
    if not ans["ok"]:
        return f":warning: No answer: {ans['reason']}."
    at = _params({**{k: fit["defaults"][k] for k in fit["variables"]["length"]
                     if k in fit["defaults"]}, **lengths})
    text = (f"largest batch ≈ *{ans['batch']}*" + (f" at {at}" if at else "")
            + f": predicted {_bytes(ans['predicted'])} ({ans['method']}), margin "
            f"{_bytes(ans['margin_bytes'])} ({ans['margin_fraction']:.1%} of "
            f"{_bytes(ans['gpu_bytes'])})")
    if ans.get("batch_upper") is not None:
        text += (f"; if the {ans['level']:.0%} upper bound must fit too: batch "
                 f"{ans['batch_upper']}")
    if ans.get("extrapolation", 1) > 1:
        text += f" — extrapolated {ans['extrapolation']:.3g}× past the largest measured batch"
        if ans["extrapolation"] > 4:
            text += "; measure near it before relying on it"
    if ans["batch"] > 4096:
        text += " (beyond llm-infer's batch limit of 4096)"
    if ans.get("caveat"):
        text += f". Note: {ans['caveat']}"
    return text + "."


def _gpu_text(fit: dict, sweep: int) -> str:
    from bot.fits import scaling
    method = scaling.gpu_method(fit)
    if method is None:
        if "host_rss_peak" in fit["memory"]:
            return (":warning: *No GPU answer from this sweep*: it measured host RSS on a CPU, "
                    "and CPU memory does not say what fits a GPU. Run the same sweep on a "
                    "CUDA worker (add `device=cuda`), then ask "
                    f"`/trial fit S<new id> gpu=H100`.")
        return ""
    gpu = fit.get("measured_gpu")
    text = ""
    if gpu:
        ans = scaling.largest_batch(fit, gpu["memory"], level=SWEEP_LEVEL)
        text = (f"*On the measured GPU* ({gpu['name']}, {_bytes(gpu['memory'])} total as the "
                f"worker reports it): " + _largest_line(ans, fit, {}) + "\n")
        oom = fit.get("oom")
        if ans["ok"] and oom and ans["batch"] >= oom["smallest_oom_batch"]:
            text += (f":warning: But batch {oom['smallest_oom_batch']} ran out of memory in this "
                     "sweep: the fit misses a term, or the OOM came from another worker. The "
                     "measured OOM wins.\n")
    return text + (f"For a named GPU: `/trial fit S{sweep} gpu=H100` (or `gpu=<size>GiB`).")


# ladder ---------------------------------------------------------------------

def reply_message(channel: str, text: str) -> dict:
    """A plain channel message (not an ephemeral reply)."""
    return {"channel": channel, "kind": "note", "text": text, "blocks": [_section(text)]}


def ladder_queued(jobs: list[dict], budget: int | None) -> dict:
    from bot.trials.ladder import STEPS
    steps = "\n".join(f"• {j['trial']} {name}: `{j['words']}`" for j, name in zip(jobs, STEPS))
    goal = f" against a budget of {summary.gib(budget)}" if budget else ""
    return reply(f"Queued ladder *L{jobs[0]['id']}*{goal}: each step on top of the previous, "
                 f"judged by the loss after the same steps from the same seed.\n{steps}\n"
                 "The table is posted in this channel when the last step ends.")


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.0%}"


def ladder_table(jobs: list[dict], reports: list[dict | None], budget: int | None) -> dict:
    from bot.trials import ladder
    table = ladder.rows(list(ladder.STEPS), reports)
    head = ["step", "trial", "peak mem", "step time", "Δmem prev/base", "Δtime prev/base",
            "loss Δ vs fp32"]
    cells = [head]
    for row in table:
        if not row["ok"]:
            cells.append([row["step"], "", row["why"][:60], "", "", "", ""])
            continue
        quality = ("—" if "quality" not in row else
                   f"{row['quality']:+.3%}" + (" ok" if row["quality_ok"] else " BROKE"))
        cells.append([row["step"], row.get("trial") or "",
                      summary.gib(row["memory"]),
                      secs(row["seconds"]),
                      f"{_pct(row.get('dmem_prev'))} / {_pct(row.get('dmem_base'))}",
                      f"{_pct(row.get('dtime_prev'))} / {_pct(row.get('dtime_base'))}",
                      quality])
    grid = table_text(cells)
    ok = {r["step"]: r for r in table if r["ok"]}
    notes = []
    if "baseline" in ok:
        notes.append(f"Memory: {ok['baseline']['method']}; quality: loss after "
                     f"{ok['baseline']['steps']} steps from the same seed, tolerance "
                     f"±{ladder.QUALITY_TOLERANCE:.0%} of the fp32 baseline.")
    if "precision" in ok and ok["precision"].get("dtime_prev") is not None:
        speed = 1 / (1 + ok["precision"]["dtime_prev"])
        notes.append(f"Precision: {speed:.2f}× the fp32 speed "
                     + ("— no speed-up on this device" if speed <= 1 else "")
                     + f" (reference: {ladder.REFERENCES['precision']}).")
    if "checkpointing" in ok and ok["checkpointing"].get("dtime_prev") is not None:
        c = ok["checkpointing"]
        notes.append(f"Checkpointing: memory {_pct(c.get('dmem_prev'))}, time "
                     f"{_pct(c['dtime_prev'])} per step (reference: "
                     f"{ladder.REFERENCES['checkpointing']}).")
    if "zero-1" in ok:
        z = ok["zero-1"]
        per = ", ".join(f"rank {r} {b / 2**20:.2f} MiB" for r, b in z["zero"])
        worst = max(abs(b - z["zero_theory"]) / z["zero_theory"] for _, b in z["zero"])
        notes.append(f"ZeRO-1 over {z['world']} ranks: optimizer states measured {per}; theory "
                     f"{z['zero_theory'] / 2**20:.2f} MiB per rank (AdamW's two fp32 moments, 8 "
                     f"bytes/param, ÷ {z['world']}; autocast keeps the weights fp32, so there "
                     "is no separate master copy — the reference's 12 bytes/param counts "
                     f"one), worst rank {worst:.2%} off. Each rank also holds "
                     f"only batch/{z['world']} sequences of activations, so its peak falls by "
                     "more than the states alone. (Reference: "
                     f"{ladder.REFERENCES['zero-1']}.)")
    advice = ladder.recommend(table, budget)
    text = (f"*Ladder L{jobs[0]['id']}* ({jobs[0]['trial']}–{jobs[-1]['trial']})\n```{grid}```\n"
            + "\n".join(notes) + "\n*Recommendation*:\n" + "\n".join(a if a.startswith(" ") else f"• {a}" for a in advice))
    return {"channel": jobs[0]["channel"], "kind": "ladder", "text": text,
            "blocks": [_section(part) for part in chunks(text)]}


def ab_queued(jobs: list[dict]) -> dict:
    return reply(f"Queued an A/B: A {jobs[0]['trial']} `{jobs[0]['words']}`, "
                 f"B {jobs[1]['trial']} `{jobs[1]['words']}`. The comparison is posted in this "
                 "channel when both have ended.")


def ab_table(jobs: list[dict], reports: list[dict | None]) -> dict:
    from bot.trials import ab
    a, b = reports
    head = (f"*A/B*: A {jobs[0]['trial']} `{jobs[0]['words']}` vs "
            f"B {jobs[1]['trial']} `{jobs[1]['words']}`")
    bad = [j["trial"] for j, r in zip(jobs, reports) if not r or r["status"] != "ok"]
    if bad:
        text = f"{head}\n:x: {', '.join(bad)} did not succeed, so there is nothing to compare."
    else:
        c = ab.compare(a, b)
        unit = "step" if a.get("training") else "request"
        lines = [f"• time per {unit}: A {secs(a['latency']['mean'])}, B "
                 f"{secs(b['latency']['mean'])} ({c['time']:+.1%}; B is "
                 f"{1 / (1 + c['time']):.2f}× A's speed)"]
        lines.append(f"• peak memory ({c['memory_method']}): {c['memory']:+.1%}"
                     if c["memory"] is not None else
                     "• peak memory: not compared (A and B were not measured the same way)")
        q = c["quality"]
        if q:
            verdict = "held" if q["held"] else "BROKE"
            lines.append(f"• quality {verdict}: {q['value']:+.2%} against a tolerance of "
                         f"±{q['tolerance']:.0%} — {q['what']}")
        else:
            lines.append("• quality: this workload reports nothing to compare")
        text = head + "\n" + "\n".join(lines)
    return {"channel": jobs[0]["channel"], "kind": "ab", "text": text,
            "blocks": [_section(text)]}
