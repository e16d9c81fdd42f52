"""A report as a few lines of plain text: the worker CLI prints it and the bot
uses it as the fallback text of its Slack message."""
from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

from worker import notes, timeline, units
from worker.i18n import N_, _, ngettext
from worker.report import Attempt, Contention, Phase, Processes, Report, Stability, Training, Units
from worker.reportparts import Built, FullDepth, Model, Slurm, Threads
from worker.spec import live_time_note
from worker.threads import cores_text
from worker.units import number

# Every figure here is measured (or a size by arithmetic): below zero, or not a
# finite number, it reads "not measured" (a report stored before the bot refused them).
size = functools.partial(units.size, measured=True)
duration = functools.partial(units.duration, measured=True)


# The built-in workloads' headline metrics, stored in English in the report and
# translated where shown (a recipe's own metric is shown as it wrote it).
METRICS = {"throughput": N_("throughput"), "p90 latency": N_("p90 latency"),
           "step time": N_("step time")}


def headline_figure(r: Report) -> str:
    h = r.get("headline")
    if not h:
        return ""
    value = (duration(h["value"]) if h["unit"] == "s"
             else number(h["value"], ".1f", unit=f" {h['unit']}"))
    metric = _(METRICS[h["metric"]]) if h["metric"] in METRICS else h["metric"]
    if r.get("scenario"):
        return f" — {r['scenario']}: {metric} {value}"
    return f" — {metric} {value}"


def headline(r: Report) -> str:
    what = f"recipe {r['recipe']}" if r.get("recipe") else r["workload"]
    values: dict[str, object] = {"who": r.get("trial") or _("trial"), "what": what,
                                 "where": r.get("worker") or r.get("env", {}).get("host") or "?",
                                 "took": duration(r.get("seconds"))}
    timed = r.get("seconds") is not None
    if r["status"] == "failed":
        err = r.get("error")
        values.update(error=err.get("class") if err else None,
                      phase=err.get("phase") if err else None)
        if timed:
            return _("{who} {what} FAILED ({error}, phase {phase}) on {where} in {took}",
                     **values)
        return _("{who} {what} FAILED ({error}, phase {phase}) on {where}", **values)
    values["figure"] = headline_figure(r)
    if timed:
        return _("{who} {what} ok on {where} in {took}{figure}", **values)
    return _("{who} {what} ok on {where}{figure}", **values)


def phases_line(r: Report) -> str:
    """Each phase's time and, where the worker sampled it, its host RSS peak;
    then the share of the trial's host peak already held before the program's
    own work (a recipe's launch, a built-in's setup: mostly imports)."""
    line = _("phases: {phases}", phases=", ".join(_phase(p) for p in r["phases"]))
    share, first = r["memory"].get("host_rss_launch_share"), timeline.import_phase(r["phases"])
    if share is None or first is None:
        return line
    return line + "; " + _("{phase} (interpreter start and imports) already held {share} of "
                           "the trial's host RSS peak", phase=first["name"],
                           share=number(share, ".0%"))


def _phase(p: Phase) -> str:
    took = f"{p['name']} {duration(p['seconds'])}"
    if "host_rss_peak" not in p:  # a report from before phases had host peaks
        return took
    if p["host_rss_peak"] is None:
        return _("{phase} (host RSS peak not measured)", phase=took)
    return _("{phase} (host RSS peak {peak})", phase=took, peak=size(p["host_rss_peak"]))


def facts(r: Report) -> list[tuple[str, str]]:
    """(label, value) pairs of the measured results, each value saying how it
    was measured; the text summary and the Slack fields both show these."""
    # A recipe's unit is what the probe timed: a generate call or a model call.
    unit = "step" if r.get("training") else (r.get("units") or {}).get("unit") or "request"
    return [*_timing(r, unit), *_conditions(r, unit), *_memory_facts(r), *_what_ran(r)]


def _timing(r: Report, unit: str) -> list[tuple[str, str]]:
    """Time per unit, training, time to first token."""
    out = []
    lat, tr = r.get("latency"), r.get("training")
    if lat and lat.get("count"):
        values: dict[str, object] = {"p50": duration(lat["p50"]), "p90": duration(lat["p90"]),
                                     "p99": duration(lat["p99"]), "mean": duration(lat["mean"])}
        values.update(count=lat["count"], units=_units(unit), stdev=duration(lat.get("stdev")))
        label = _("time per step") if tr else _latency_label(unit)
        if lat.get("stdev") is not None:
            out.append((label, _("p50 {p50}, p90 {p90}, p99 {p99}, mean {mean}, stdev {stdev} "
                                 "over {count} {units}", **values)))
        else:
            out.append((label, _("p50 {p50}, p90 {p90}, p99 {p99}, mean {mean} over {count} "
                                 "{units}", **values)))
    if tr:
        out.append((_("training"), training(tr)))
    ttft, dec = r.get("ttft"), r.get("decode_per_token")
    if ttft and ttft.get("count"):
        values = {"p50": duration(ttft["p50"]), "p90": duration(ttft["p90"])}
        if dec:
            text = _("p50 {p50}, p90 {p90}; decode per token p50 {decode_p50}, p90 {decode_p90}",
                     decode_p50=duration(dec["p50"]), decode_p90=duration(dec["p90"]), **values)
        else:
            text = f"p50 {values['p50']}, p90 {values['p90']}"
        out.append((_("time to first token"), text))
    return out


def _conditions(r: Report, unit: str) -> list[tuple[str, str]]:
    """How steady the times were, and what the machine and threads were doing."""
    out = []
    if timed_live_on_cpu(r):
        out.append((_("timed under malloc=live"), live_time_note()))
    st = r.get("stability")
    if st:
        out.append((_("stability"), stability(st, unit)))
    pr, busy, threads = r.get("processes"), r.get("contention"), r.get("threads")
    if pr:
        out.append((_("processes"), processes_line(pr, unit)))
    if busy:
        out.append((_("machine"), machine(busy)))
    if threads:
        out.append((_("threads"), threads_line(threads)))
    thr = r.get("throughput")
    if thr:
        out.append((_("throughput"), number(thr["value"], ".1f", unit=f" {thr['unit']}")))
    return out


def _memory_facts(r: Report) -> list[tuple[str, str]]:
    m, out = r["memory"], []
    if m.get("peak_allocated") is not None:
        out.append((_("GPU peak allocated / reserved"),
                    _("{allocated} / {reserved} (torch allocator)",
                      allocated=size(m["peak_allocated"]), reserved=size(m["peak_reserved"]))))
    if m.get("device_used_peak") is not None:
        out.append((_("GPU device used / trial processes"),
                    _("{device} / {processes} (NVML, sampled ~100 Hz)",
                      device=size(m["device_used_peak"]), processes=size(m["process_used_peak"]))))
    peak, kernel = m.get("host_rss_peak"), m.get("host_rss_peak_kernel")
    how = (_("{peak} (the child's exact peak, kernel max RSS: it ran alone{allocator})")
           if peak is not None and peak == kernel else
           _("{peak} (child tree, sampled ~100 Hz{allocator}; kernel max RSS {kernel})"))
    return [*out, (_("host RSS peak"),
                   how.format(peak=size(peak), allocator=allocator(r), kernel=size(kernel)))]


def _what_ran(r: Report) -> list[tuple[str, str]]:
    """The scale, the unit, the model, the depth, Slurm and the environment."""
    out = []
    sc, tr = r.get("scale"), r.get("training")
    if sc and tr:
        out.append((_("scale"), _("batch {batch} × seq {seq}, {tokens} tokens trained in the "
                                  "measured steps", batch=sc["batch"], seq=sc["prompt_tokens"],
                                  tokens=sc["tokens"])))
    elif sc:
        out.append((_("scale"), _("batch {batch}, prompt {prompt}, gen {gen} tokens, {tokens} "
                                  "tokens processed", batch=sc["batch"],
                                  prompt=sc["prompt_tokens"], gen=sc["gen_tokens"],
                                  tokens=sc["tokens"])))
    ran = r.get("units")
    if ran and ran.get("kind"):
        out.append((_("one run (the recipe's unit)"), run_unit(ran)))
    if r.get("model"):
        out.append((_("model"), model_line(r["model"])))
    if r.get("full_depth"):
        label = (_("full depth (counted, not measured)") if r["full_depth"].get("sizing")
                 else _("full depth (arithmetic, not measured)"))
        out.append((label, full_depth(r["full_depth"])))
    if r.get("slurm"):
        out.append(("Slurm", slurm_line(r["slurm"])))
    if (r.get("env") or {}).get("environment"):
        out.append((_("environment"), environment_line(r)))
    return out


# What a program ran with that a reader of a paper's repository looks for first.
KEY_PACKAGES = ("torch", "transformers", "accelerate", "flash-attn", "datasets")


def environment_line(r: Report) -> str:
    """The recipe's own environment: built now or reused, by what, with what."""
    e: Built = r["env"].get("environment") or {}  # facts() shows this line only with one
    built = [p for p in r["phases"] if p.get("found_by") == "recipe-environment"]
    setup: Phase = built[0] if built else {}
    packages = e.get("packages") or {}
    versions = ", ".join(f"{n} {packages[n]}" for n in KEY_PACKAGES if n in packages)
    torch = (_("the worker's {version}", version=e["torch"]) if e.get("torch")
             else _("the recipe's own"))
    values = {"builder": e.get("builder"), "python": e.get("python"), "torch": torch,
              "versions": versions or "-", "count": len(packages)}
    if setup.get("cached"):
        text = _("reused, built {when} in {took} by {builder}; Python {python}, torch: {torch}; "
                 "{versions} ({count} packages)", when=_utc(e.get("built_at")),
                 took=duration(e.get("build_seconds")), **values)
    else:
        text = _("built in {took} by {builder}; Python {python}, torch: {torch}; {versions} "
                 "({count} packages)", took=duration(setup.get("seconds")), **values)
    if e.get("torch_pins_not_used"):
        text += "; " + _("the repository pins {pins}; this worker's torch {version} is used",
                         pins=", ".join(e["torch_pins_not_used"]), version=e.get("torch"))
    return text


def _utc(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t)) if t else "?"


def run_unit(u: Units) -> str:
    """What one run of a recipe is, its calls apart per model, and the whole
    program's time beside them."""
    program = duration((u.get("program") or {}).get("seconds"))
    if u["kind"] == "program":
        return _("the whole program, {seconds} from its start to its exit", seconds=program)
    models = "; ".join(
        _("{model} ({params} params) {count} × mean {mean}", model=m["model"],
          params=f"{m['params']:,}" if m.get("params") else "?", count=m["count"],
          mean=duration(m.get("mean"))) if m.get("model") else
        _("{count} × mean {mean}", count=m["count"], mean=duration(m.get("mean")))
        for m in u.get("models") or [])
    return _("one {unit} (unit = {kind}): {models}; the whole program {seconds}",
             unit=u.get("unit"), kind=u["kind"], models=models or _("none"),
             seconds=program)


def _units(unit: str) -> str:
    """The plural of a timed unit; a recipe's own unit stays as its probe names it."""
    return {"request": _("requests"), "step": _("steps")}.get(unit, f"{unit}s")


def _latency_label(unit: str) -> str:
    return _("latency per request") if unit == "request" else _("latency per {unit}", unit=unit)


def timed_live_on_cpu(r: Mapping[str, Any]) -> bool:  # a Report, or the bot's stored one
    """One pass under malloc=live on the CPU: its times carry the page faults
    of the pinned mmap threshold (malloc=auto times a separate glibc pass)."""
    env = r.get("env") or {}
    return ((r.get("params") or {}).get("malloc") == "live" and not r.get("passes")
            and (env.get("device") == "cpu" or not env.get("gpu_count")))


def allocator(r: Report) -> str:
    """Under which C allocator setting host RSS was measured (docs/commands.md, malloc=)."""
    first = (r.get("passes") or [{}])[0]
    if first.get("pass") == "memory":
        return _(", from a {seconds} memory pass under malloc=live; times from a glibc pass",
                 seconds=duration(first.get("seconds")))
    malloc = (r.get("params") or {}).get("malloc")
    if malloc == "live":
        return ", malloc=live"
    return _(", glibc's default: holds freed blocks") if malloc else ""


def full_depth(fd: FullDepth) -> str:
    """A model's full depth, by the decoder's arithmetic (llm-*) or counted by
    transformers on the meta device (hf-*): no trial ran it."""
    values = {"name": fd.get("preset") or fd.get("model"), "layers": fd["layers"],
              "trial_layers": fd["trial_layers"], "params": number(fd["params"], ","),
              "weights": size(fd["weight_bytes"]), "dtype": fd["dtype"],
              "formula": fd["kv_formula"], "cache": size(fd["kv_cache_bytes"])}
    params = (_("{params} params counted by transformers on the meta device", **values)
              if fd.get("sizing") else _("{params} params", **values))
    if fd.get("published_params"):
        params = _("{params} ({error} vs the published {published})", params=params,
                   error=number(fd["relative_error"], "+.3%", measured=False),
                   published=fd["published_text"])
    return (_("{name} at {layers} layers (this trial {trial_layers}): {params_line}, {weights} "
              "of {dtype} weights; KV cache {formula} = {cache}", params_line=params, **values)
            + _per_sequence(fd))


def _per_sequence(fd: FullDepth) -> str:
    """The same cache per sequence, the figure "Fits on" shows beside it."""
    batch = fd.get("batch") or 1
    if batch <= 1:
        return ""
    return _(" ({size} per sequence × batch {batch})",
             size=size(_over(fd["kv_cache_bytes"], batch)), batch=batch)


def model_line(m: Model) -> str:
    """An hf-* trial's model: what transformers built, from where."""
    return _("{name}: {architecture}, {layers} of {full_layers} layers, attn={attn}, "
             "transformers {transformers}, {weights}; config from {source}", name=m["name"],
             architecture=m.get("architecture") or m.get("model_type"), layers=m["layers"],
             full_layers=m["full_layers"], attn=m.get("attn"),
             transformers=m.get("transformers"), weights=notes.text(m["weights"]),
             source=notes.said(m.get("source_note"), m["source"]))


def slurm_line(s: Slurm) -> str:
    """Queue wait apart from run time: on a rented cluster the wait is idle money."""
    if not s.get("job_id"):
        return _("refused by sbatch (partition {partition})", partition=s["partition"])
    jobs = s.get("jobs") or []
    values = {"job": s["job_id"], "state": s["state"], "partition": s["partition"],
              "node": s.get("node"), "wait": duration(s.get("queue_wait_s")),
              "ran": duration(s.get("run_s")), "n": len(jobs)}
    if len(jobs) > 1:
        return _("job {job} {state} on {partition}/{node}: queue wait {wait}, ran {ran}, "
                 "{n} submissions", **values)
    return _("job {job} {state} on {partition}/{node}: queue wait {wait}, ran {ran}", **values)


def training(tr: Training) -> str:
    ranks = tr["ranks"]
    states = ", ".join(_("rank {rank} {size} MiB", rank=x["rank"],
                         size=number(_over(x["optimizer_state_bytes"], 2**20), ".2f"))
                       for x in ranks)
    return _("{params} params, {precision}, checkpointing {checkpointing}, ZeRO-{zero} over "
             "{world} rank(s); loss {first} → {final} after {steps} steps; optimizer states "
             "{states} (theory {theory_size} MiB per rank: {theory})",
             params=number(tr["params"], ","), precision=tr["precision"],
             checkpointing=tr["checkpointing"], zero=tr["zero"], world=tr["world"],
             first=_loss(tr["loss_first"]), final=_loss(tr["loss_final"]),
             steps=tr["steps"], states=states,
             theory_size=number(_over(tr["optimizer_state_theory_per_rank"], 2**20), ".2f"),
             theory=notes.said(tr.get("theory_note"), tr["theory"]))


def _over(x: float | None, d: float) -> float | None:  # null kept null (a NaN stored before #29)
    return None if x is None else x / d


def _loss(loss: float | None) -> str:
    """A training loss; null only when it was not finite (the worker's, llm_train)."""
    return _("not finite") if loss is None else number(loss, ".4f", measured=False)


# Why measuring stopped (worker/repeat.py), as the stability line says it.
STOPPED_BY = {"stable": N_("stable"), "time cap": N_("time cap"), "count": N_("count"),
              "max count": N_("max count")}


def _stopped_by(why: str | None) -> str | None:
    return _(STOPPED_BY[why]) if why is not None and why in STOPPED_BY else why


def stability(st: Stability, unit: str = "request") -> str:
    v = {"ratio": number(st["iqr_over_median"], ".1%"),
         "runs": _runs(st["count"], unit), "bound": number(st.get("bound") or 0, ".0%"),
         "threshold": number(st.get("threshold") or 0, ".0%"),
         "stopped_by": _stopped_by(st.get("stopped_by"))}
    if not st.get("threshold") and st.get("bound"):  # a fixed count, judged against a bound
        if st["stable"] is None:
            return _("IQR/median {ratio} over a fixed {runs}: too few to judge", **v)
        if st["stable"]:
            return _("IQR/median {ratio} over a fixed {runs}, under the {bound} bound", **v)
        return _("UNSTABLE: IQR/median {ratio} ≥ the {bound} bound over a fixed {runs}; "
                 "treat these figures with care", **v)
    if st["stable"] is None:
        return _("IQR/median {ratio} over a fixed {runs}", **v)
    if st["stable"]:
        return _("stable: IQR/median {ratio} < {threshold} after {runs}", **v)
    return _("UNSTABLE: IQR/median {ratio} ≥ {threshold} after {runs} ({stopped_by}); treat "
             "these figures with care", **v)


def processes_line(pr: Processes, unit: str = "request") -> str:
    """How many fresh processes the time came from and each spread (a
    processes=N trial, worker/launcher/processes.py)."""
    if pr["count"] == 1:
        return _("one process (processes=1): a plan's interval from this trial leaves out "
                 "drift between processes")
    if "ran" in pr:
        return _("{ran} of {count} fresh processes ran; the last failed", ran=pr["ran"],
                 count=pr["count"])
    w, b = pr.get("within") or {}, pr.get("between") or {}
    return _("{count} fresh processes, {took} in all: sd of one {unit} within a process "
             "{within} ({wdof} dof); sd of the processes' time per {unit} {between} ({bdof} "
             "dof), {excess} of it beyond the runs' own spread (drift between processes)",
             count=pr["count"], took=duration(pr.get("seconds")), unit=unit,
             within=duration(w.get("sd")), wdof=w.get("dof"),
             between=duration(b.get("sd")), bdof=b.get("dof"),
             excess=duration(b.get("excess_sd")))


def _runs(count: int, unit: str) -> str:
    """"5 requests", "1 step"; a recipe's own unit stays as its probe names it."""
    if unit == "request":
        return ngettext("{n} request", "{n} requests", count)
    if unit == "step":
        return ngettext("{n} step", "{n} steps", count)
    return f"{count} {unit}{'s' * (count != 1)}"


def busy_line(r: Mapping[str, Any]) -> str | None:  # a Report, or the bot's stored one
    """The warning a contended trial carries wherever it is shown."""
    c = r.get("contention") or {}
    return notes.said(c.get("summary_note"), c.get("summary")) if c.get("flagged") else None


def threads_line(t: Threads) -> str:
    """The intra-op threads in one short line (worker/threads.py)."""
    values = {"n": t["threads"], "cores": cores_text(t["cores"]),
              "free": cores_text(t.get("free_cores") or [])}
    if t["chosen_by"] == "user":
        return _("{n} on cores {cores}, as asked (threads={n})", **values)
    if t.get("pinned"):
        return _("{n} on cores {cores}, pinned, cores {free} left free; chosen by the worker",
                 **values)
    return _("{n} on cores {cores}; chosen by the worker", **values)


def machine(c: Contention) -> str:
    """Busy or quiet, in plain words, from the contention probe."""
    summary = c.get("summary")
    if summary:  # said() gives the English back where the note is not one it knows
        return notes.said(c.get("summary_note"), summary) or summary
    phases = c.get("phases") or {}
    # The run phase, or a recipe's longest marked phase: where its time went.
    name = "run" if "run" in phases else max(phases, key=lambda n: phases[n]["seconds"],
                                              default=None)
    if name is None:
        return _("contention not measured: no CPU counters were read during the trial's phases")
    p = phases[name]
    if c.get("cores"):  # pinned: judged on its own cores
        line = _("quiet: other processes used {others} of the trial's cores {cores} during the "
                 "{phase} phase (steal {steal}; flagged above {threshold})",
                 others=number(p["others_cpu"], ".0%"), cores=cores_text(c["cores"]),
                 phase=name, steal=number(p["steal"], ".0%"),
                 threshold=number(c["threshold"]["others_cpu"], ".0%"))
        near = c.get("neighbour")
        if near:
            line += "; " + _("a neighbour used {share} of cores {free}, which the trial leaves "
                             "free (not counted)", share=number(near["others_cpu_free"], ".0%"),
                             free=cores_text(c.get("free_cores") or []))
        return line
    return _("quiet: other processes used {others} of the {cpus} CPUs during the {phase} phase "
             "(steal {steal}; flagged above {threshold})", others=number(p["others_cpu"], ".0%"),
             cpus=c["cpus"], phase=name, steal=number(p["steal"], ".0%"),
             threshold=number(c["threshold"]["others_cpu"], ".0%"))


def env_line(r: Report) -> str:
    e = r.get("env") or {}
    if r.get("recipe"):
        gpu = (f"{e['gpu_count']}× {e['gpu_name']}, CUDA {e.get('cuda')}, torch {e.get('torch')}"
               if e.get("gpu_count") else _("no CUDA allocator seen"))
        return _("env: {host}: {gpu}; code {code} in {cwd}", host=e.get("host", "?"), gpu=gpu,
                 code=e.get("code_version"), cwd=e.get("recipe_cwd"))
    gpu = (_("{gpus} ({memory}), driver {driver}, CUDA {cuda}",
             gpus=f"{e['gpu_count']}× {e['gpu_name']}", memory=size(e["gpu_memory"]),
             driver=e.get("driver") or "?", cuda=e.get("cuda") or "?")
           if e.get("gpu_count") else f"CPU {e.get('cpu', '?')}")
    return _("env: {device} on {host}: {gpu}; torch {torch}, Python {python}",
             device=e.get("device", "?"), host=e.get("host", "?"), gpu=gpu,
             torch=e.get("torch", "?"), python=e.get("python", "?"))


def retry_line(r: Report) -> str | None:
    """Say plainly when the measured config is not the requested one."""
    tries = r.get("attempts") or []
    if len(tries) < 2:
        return None
    changed = {k: v for k, v in r["params"].items() if r["requested"].get(k) != v}
    said = "; ".join(_try(t) for t in tries)
    measured = ", ".join(_("{key}={value} (requested {requested})", key=k, value=v,
                           requested=r["requested"][k]) for k, v in changed.items())
    values = {"measured": measured, "said": said, "lost": duration(r.get("seconds_lost"))}
    if r["status"] == "ok":
        return _("RETRIED: measured at {measured}, not the requested config. {said}. {lost} "
                 "lost to failed tries", **values)
    return _("RETRIED: last tried at {measured}, not the requested config. {said}. {lost} lost "
             "to failed tries", **values)


def _try(t: Attempt) -> str:
    what = t["error_class"] or t["status"]
    if t["next"]:
        return _("try {attempt}: {what}, then {next}", attempt=t["attempt"], what=what,
                 next=t["next"])
    return _("try {attempt}: {what}", attempt=t["attempt"], what=what)


def text(r: Report) -> str:
    lines = [headline(r)]
    retried, busy, err = retry_line(r), busy_line(r), r.get("error")
    if retried:
        lines.append(retried)
    if busy:
        lines.append(_("BUSY: {warning}", warning=busy))
    if r["status"] == "failed":
        message = err["message"] if err else ""
        lines.append(_("error: {message}", message=(message.strip().splitlines() or [""])[-1]))
    lines += [phases_line(r), *(f"{label}: {value}" for label, value in facts(r)), env_line(r)]
    return "\n".join(lines)
