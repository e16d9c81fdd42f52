"""A report as a few lines of plain text: the worker CLI prints it and the bot
uses it as the fallback text of its Slack message."""
from __future__ import annotations

from worker.report import Report
from worker.spec import LIVE_TIME_NOTE
from worker.units import duration, size


def headline_figure(r: Report) -> str:
    h = r.get("headline")
    if not h:
        return ""
    value = duration(h["value"]) if h["unit"] == "s" else f"{h['value']:.1f} {h['unit']}"
    where = f"{r['scenario']}: " if r.get("scenario") else ""
    return f" — {where}{h['metric']} {value}"


def headline(r: Report) -> str:
    who = r.get("trial") or "trial"
    what = f"recipe {r['recipe']}" if r.get("recipe") else r["workload"]
    where = r.get("worker") or r.get("env", {}).get("host") or "?"
    took = f" in {duration(r['seconds'])}" if r.get("seconds") is not None else ""
    if r["status"] == "failed":
        err = r.get("error") or {}
        return (f"{who} {what} FAILED ({err.get('class')}, phase "
                f"{err.get('phase')}) on {where}{took}")
    return f"{who} {what} ok on {where}{took}{headline_figure(r)}"


def phases_line(r: Report) -> str:
    return "phases: " + ", ".join(f"{p['name']} {duration(p['seconds'])}" for p in r["phases"])


def facts(r: Report) -> list[tuple[str, str]]:
    """(label, value) pairs of the measured results, each value saying how it
    was measured; the text summary and the Slack fields both show these."""
    out = []
    lat, thr, sc, m = r.get("latency"), r.get("throughput"), r.get("scale"), r["memory"]
    tr = r.get("training")
    # A recipe's unit is what the probe timed: a generate call or a model call.
    unit = "step" if tr else (r.get("units") or {}).get("unit") or "request"
    if lat and lat.get("count"):
        spread = f", stdev {duration(lat['stdev'])}" if lat.get("stdev") is not None else ""
        out.append(("time per step" if tr else f"latency per {unit}",
                    f"p50 {duration(lat['p50'])}, p90 {duration(lat['p90'])}, "
                    f"p99 {duration(lat['p99'])}, mean {duration(lat['mean'])}{spread} over "
                    f"{lat['count']} {unit}s"))
    if tr:
        out.append(("training", training(tr)))
    ttft, dec = r.get("ttft"), r.get("decode_per_token")
    if ttft and ttft.get("count"):
        per = (f"; decode per token p50 {duration(dec['p50'])}, p90 {duration(dec['p90'])}"
               if dec else "")
        out.append(("time to first token",
                    f"p50 {duration(ttft['p50'])}, p90 {duration(ttft['p90'])}"
                    + per))
    if timed_live_on_cpu(r):
        out.append(("timed under malloc=live", LIVE_TIME_NOTE))
    st = r.get("stability")
    if st:
        out.append(("stability", stability(st, unit)))
    if r.get("contention"):
        out.append(("machine", machine(r["contention"])))
    if thr:
        out.append(("throughput", f"{thr['value']:.1f} {thr['unit']}"))
    if m.get("peak_allocated") is not None:
        out.append(("GPU peak allocated / reserved", f"{size(m['peak_allocated'])} / "
                    f"{size(m['peak_reserved'])} (torch allocator)"))
    if m.get("device_used_peak") is not None:
        out.append(("GPU device used / trial processes", f"{size(m['device_used_peak'])} / "
                    f"{size(m['process_used_peak'])} (NVML, sampled ~100 Hz)"))
    out.append(("host RSS peak", f"{size(m.get('host_rss_peak'))} (child tree, sampled ~100 Hz"
                f"{allocator(r)}; kernel max RSS {size(m.get('host_rss_peak_kernel'))})"))
    if sc and tr:
        out.append(("scale", f"batch {sc['batch']} × seq {sc['prompt_tokens']}, "
                    f"{sc['tokens']} tokens trained in the measured steps"))
    elif sc:
        out.append(("scale", f"batch {sc['batch']}, prompt {sc['prompt_tokens']}, gen "
                    f"{sc['gen_tokens']} tokens, {sc['tokens']} tokens processed"))
    if r.get("model"):
        out.append(("model", model_line(r["model"])))
    if r.get("full_depth"):
        how = "counted, not measured" if r["full_depth"].get("sizing") else \
            "arithmetic, not measured"
        out.append((f"full depth ({how})", full_depth(r["full_depth"])))
    if r.get("slurm"):
        out.append(("Slurm", slurm_line(r["slurm"])))
    return out


def timed_live_on_cpu(r: Report) -> bool:
    """One pass under malloc=live on the CPU: its times carry the page faults
    of the pinned mmap threshold (malloc=auto times a separate glibc pass)."""
    env = r.get("env") or {}
    return ((r.get("params") or {}).get("malloc") == "live" and not r.get("passes")
            and (env.get("device") == "cpu" or not env.get("gpu_count")))


def allocator(r: Report) -> str:
    """Under which C allocator setting host RSS was measured (docs/commands.md, malloc=)."""
    first = (r.get("passes") or [{}])[0]
    if first.get("pass") == "memory":
        return (f", from a {duration(first.get('seconds'))} memory pass under malloc=live; "
                "times from a glibc pass")
    malloc = (r.get("params") or {}).get("malloc")
    if malloc == "live":
        return ", malloc=live"
    return ", glibc's default: holds freed blocks" if malloc else ""


def full_depth(fd: dict) -> str:
    """A model's full depth, by the decoder's arithmetic (llm-*) or counted by
    transformers on the meta device (hf-*): no trial ran it."""
    name = fd.get("preset") or fd.get("model")
    vs = (f" ({fd['relative_error']:+.3%} vs the published {fd['published_text']})"
          if fd.get("published_params") else "")
    how = " counted by transformers on the meta device" if fd.get("sizing") else ""
    return (f"{name} at {fd['layers']} layers (this trial {fd['trial_layers']}): "
            f"{fd['params']:,} params{how}{vs}, {size(fd['weight_bytes'])} of {fd['dtype']} "
            f"weights; KV cache {fd['kv_formula']} = {size(fd['kv_cache_bytes'])}"
            + _per_sequence(fd))


def _per_sequence(fd: dict) -> str:
    """The same cache per sequence, the figure "Fits on" shows beside it."""
    batch = fd.get("batch") or 1
    if batch <= 1:
        return ""
    return f" ({size(fd['kv_cache_bytes'] / batch)} per sequence × batch {batch})"


def model_line(m: dict) -> str:
    """An hf-* trial's model: what transformers built, from where."""
    return (f"{m['name']}: {m.get('architecture') or m.get('model_type')}, {m['layers']} of "
            f"{m['full_layers']} layers, attn={m.get('attn')}, transformers "
            f"{m.get('transformers')}, {m['weights']}; config from {m['source']}")


def slurm_line(s: dict) -> str:
    """Queue wait apart from run time: on a rented cluster the wait is idle money."""
    if not s.get("job_id"):
        return f"refused by sbatch (partition {s['partition']})"
    jobs = s.get("jobs") or []
    again = f", {len(jobs)} submissions" if len(jobs) > 1 else ""
    return (f"job {s['job_id']} {s['state']} on {s['partition']}/{s.get('node')}: queue wait "
            f"{duration(s.get('queue_wait_s'))}, ran {duration(s.get('run_s'))}{again}")


def training(tr: dict) -> str:
    ranks = tr["ranks"]
    states = ", ".join(f"rank {x['rank']} {x['optimizer_state_bytes'] / 2**20:.2f} MiB"
                       for x in ranks)
    return (f"{tr['params']:,} params, {tr['precision']}, checkpointing {tr['checkpointing']}, "
            f"ZeRO-{tr['zero']} over {tr['world']} rank(s); loss {tr['loss_first']:.4f} → "
            f"{tr['loss_final']:.4f} after {tr['steps']} steps; optimizer states {states} "
            f"(theory {tr['optimizer_state_theory_per_rank'] / 2**20:.2f} MiB per rank: "
            f"{tr['theory']})")


def stability(st: dict, unit: str = "request") -> str:
    ratio = "n/a" if st["iqr_over_median"] is None else f"{st['iqr_over_median']:.1%}"
    runs = f"{st['count']} {unit}{'s' * (st['count'] != 1)}"
    bound = st.get("bound")
    if not st.get("threshold") and bound:  # a fixed count, judged against a stated bound
        if st["stable"] is None:
            return f"IQR/median {ratio} over a fixed {runs}: too few to judge"
        if st["stable"]:
            return f"IQR/median {ratio} over a fixed {runs}, under the {bound:.0%} bound"
        return (f"UNSTABLE: IQR/median {ratio} ≥ the {bound:.0%} bound over a fixed {runs}; "
                "treat these figures with care")
    if st["stable"] is None:
        return f"IQR/median {ratio} over a fixed {runs}"
    if st["stable"]:
        return f"stable: IQR/median {ratio} < {st['threshold']:.0%} after {runs}"
    return (f"UNSTABLE: IQR/median {ratio} ≥ {st['threshold']:.0%} after {runs} "
            f"({st['stopped_by']}); treat these figures with care")


def busy_line(r: Report) -> str | None:
    """The warning a contended trial carries wherever it is shown."""
    c = r.get("contention") or {}
    return c.get("summary") if c.get("flagged") else None


def machine(c: dict) -> str:
    """Busy or quiet, in plain words, from the contention probe."""
    if c.get("summary"):
        return c["summary"]
    phases = c.get("phases") or {}
    # The run phase, or a recipe's longest marked phase: where its time went.
    name = "run" if "run" in phases else max(phases, key=lambda n: phases[n]["seconds"],
                                              default=None)
    if name is None:
        return "contention not measured: no CPU counters were read during the trial's phases"
    p = phases[name]
    return (f"quiet: other processes used {p['others_cpu']:.0%} of the {c['cpus']} CPUs "
            f"during the {name} phase (steal {p['steal']:.0%}; flagged above "
            f"{c['threshold']['others_cpu']:.0%})")


def env_line(r: Report) -> str:
    e = r.get("env") or {}
    if r.get("recipe"):
        gpu = (f"{e['gpu_count']}× {e['gpu_name']}, CUDA {e.get('cuda')}, torch {e.get('torch')}"
               if e.get("gpu_count") else "no CUDA allocator seen")
        return (f"env: {e.get('host', '?')}: {gpu}; code {e.get('code_version')} in "
                f"{e.get('recipe_cwd')}")
    gpu = (f"{e['gpu_count']}× {e['gpu_name']} ({size(e['gpu_memory'])}), "
           f"driver {e.get('driver')}, "
           f"CUDA {e.get('cuda')}" if e.get("gpu_count") else f"CPU {e.get('cpu', '?')}")
    return (f"env: {e.get('device', '?')} on {e.get('host', '?')}: {gpu}; torch "
            f"{e.get('torch', '?')}, Python {e.get('python', '?')}")


def retry_line(r: Report) -> str | None:
    """Say plainly when the measured config is not the requested one."""
    tries = r.get("attempts") or []
    if len(tries) < 2:
        return None
    changed = {k: v for k, v in r["params"].items() if r["requested"].get(k) != v}
    said = "; ".join(f"try {t['attempt']}: {t['error_class'] or t['status']}"
                     + (f", then {t['next']}" if t["next"] else "") for t in tries)
    measured = ", ".join(f"{k}={v} (requested {r['requested'][k]})" for k, v in changed.items())
    verb = "measured at" if r["status"] == "ok" else "last tried at"
    return (f"RETRIED: {verb} {measured}, not the requested config. {said}. "
            f"{duration(r.get('seconds_lost'))} lost to failed tries")


def text(r: Report) -> str:
    lines = [headline(r)]
    if retry_line(r):
        lines.append(retry_line(r))
    if busy_line(r):
        lines.append(f"BUSY: {busy_line(r)}")
    if r["status"] == "failed":
        lines.append("error: " + (r["error"]["message"].strip().splitlines() or [""])[-1])
    lines += [phases_line(r), *(f"{label}: {value}" for label, value in facts(r)), env_line(r)]
    return "\n".join(lines)
