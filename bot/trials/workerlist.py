"""`/trial workers`: each worker, its GPUs, whether it is idle, busy or offline
and since when, its current trial, and its measured idle hours this week.
Pure: rows and the time in, a reply out."""
from __future__ import annotations

import datetime as dt

from worker.units import duration


def week_start(now: float) -> str:
    """Monday of `now`'s UTC week, as worker_idle's days are UTC days."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    return (day - dt.timedelta(days=day.weekday())).isoformat()


def _since(t: float | None, now: float) -> str:
    if not t:
        return ""
    stamp = dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%a %H:%M UTC")
    return f" since {stamp} ({duration(max(0.0, now - t))} ago)"


def state(w: dict, now: float, online_seconds: float) -> str:
    if now - (w["last_seen"] or 0) > online_seconds:
        return "offline" + _since(w["last_seen"], now)
    if w["job"]:
        return f"busy with *T{w['job']}*" + _since(w["job_started"], now)
    return "idle" + _since(max(w["last_finished"] or 0, w["registered"] or 0), now)


def text(workers: list[dict], now: float, online_seconds: float) -> str:
    if not workers:
        return ("No worker has registered yet. Start one on a GPU box with "
                "`trialbot-worker --server URL --token TOKEN`.")
    lines = [f"Workers (idle hours: measured by each worker, ready with nothing to run, "
             f"since Monday {week_start(now)} UTC):"]
    for w in workers:
        gpus = w["info"].get("gpus") or []
        kind = (f"{len(gpus)}× {gpus[0]}" if gpus and len(set(gpus)) == 1 else
                ", ".join(gpus) if gpus else f"no GPU ({w['info'].get('cpus', '?')} CPU cores)")
        labels = " ".join(f"`{k}={v}`" for k, v in sorted((w["info"].get("labels") or {}).items()))
        lines.append(f"• *{w['name']}* — {kind}{' — ' + labels if labels else ''} — "
                     f"{state(w, now, online_seconds)} — idle {w['idle_seconds'] / 3600:.1f} h "
                     "this week" + hf_text(w["info"].get("hf") or {}))
    return "\n".join(lines)


def hf_text(hf: dict) -> str:
    """What hf-* trials may ask of a worker: its transformers and its configs."""
    if not hf.get("transformers"):
        return ""
    extra = [f"flash-attn {hf['flash_attn']}"] if hf.get("flash_attn") else []
    extra += ["hub configs"] if hf.get("hub") else []
    names = [n for n, m in (hf.get("models") or {}).items() if not m.get("error")]
    bad = [n for n, m in (hf.get("models") or {}).items() if m.get("error")]
    return (f" — transformers {hf['transformers']}{''.join(', ' + e for e in extra)}"
            + (f"; models {', '.join(f'`{n}`' for n in names)}" if names else "")
            + (f"; cannot build {', '.join(f'`{n}`' for n in bad)}" if bad else ""))
