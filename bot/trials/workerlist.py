"""`/trial workers`: each worker, its GPUs, whether it is idle, busy or offline
and since when, its current trial, and its measured idle hours this week; and,
to admins, messages the outbox has failed to send for too long.
Pure: rows and the time in, a reply out."""
from __future__ import annotations

import datetime as dt

from bot.states import Json
from worker import i18n
from worker.api import duration
from worker.i18n import N_, _, ngettext


def week_start(now: float) -> str:
    """Monday of `now`'s UTC week, as worker_idle's days are UTC days."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    return (day - dt.timedelta(days=day.weekday())).isoformat()


# Each state with and without its "since" (a worker that never ran has none).
STATES = {"offline": (N_("offline"), N_("offline since {stamp} ({ago} ago)")),
          "busy": (N_("busy with *T{job}*"), N_("busy with *T{job}* since {stamp} ({ago} ago)")),
          "idle": (N_("idle"), N_("idle since {stamp} ({ago} ago)"))}


def _state(kind: str, t: float | None, now: float, **values: object) -> str:
    bare, since = STATES[kind]
    if not t:
        return _(bare, **values)
    stamp = i18n.stamp(dt.datetime.fromtimestamp(t, dt.timezone.utc), "%H:%M UTC")
    return _(since, stamp=stamp, ago=duration(max(0.0, now - t)), **values)


def offline(last_seen: float | None, now: float) -> str:
    """`offline since Mon 10:00 UTC (259200 s ago)`."""
    return _state("offline", last_seen, now)


def state(w: Json, now: float, online_seconds: float) -> str:
    if now - (w["last_seen"] or 0) > online_seconds:
        return offline(w["last_seen"], now)
    if w["job"]:
        return _state("busy", w["job_started"], now, job=w["job"])
    return _state("idle", max(w["last_finished"] or 0, w["registered"] or 0), now)


def text(workers: list[Json], now: float, online_seconds: float) -> str:
    if not workers:
        return _("No worker has registered yet. Start one on a GPU box with "
                 "`trialbot-worker --server URL --token TOKEN`.")
    lines = [_("Workers (idle hours: measured by each worker, ready with nothing to run, "
               "since Monday {day} UTC):", day=week_start(now))]
    for w in workers:
        kind = gpu_kind(w["info"]) or _("no GPU ({cpus} CPU cores)",
                                        cpus=w["info"].get("cpus", "?"))
        labels = " ".join(f"`{k}={v}`" for k, v in sorted((w["info"].get("labels") or {}).items()))
        values = {"name": w["name"], "kind": kind, "state": state(w, now, online_seconds),
                  "hours": f"{w['idle_seconds'] / 3600:.1f}"}
        line = (_("• *{name}* — {kind} — {labels} — {state} — idle {hours} h this week",
                  labels=labels, **values) if labels else
                _("• *{name}* — {kind} — {state} — idle {hours} h this week", **values))
        lines.append(line + hf_text(w["info"].get("hf") or {}))
    return "\n".join(lines)


def gpu_kind(info: Json) -> str:
    """A worker's GPUs in a few words: `2× NVIDIA H100`, or each named; "" for none."""
    gpus = info.get("gpus") or []
    return f"{len(gpus)}× {gpus[0]}" if len(set(gpus)) == 1 else ", ".join(gpus)


def hf_text(hf: Json) -> str:
    """What hf-* trials may ask of a worker: its transformers and its configs."""
    if not hf.get("transformers"):
        return ""
    extra = [f"flash-attn {hf['flash_attn']}"] if hf.get("flash_attn") else []
    extra += [_("hub configs")] if hf.get("hub") else []
    # a model whose class refuses the default attn=sdpa is listed with what it takes
    names = [n + (f"` (attn={'/'.join(m['attn'])})" if m.get("attn") and "sdpa" not in m["attn"]
                  else "`")
             for n, m in (hf.get("models") or {}).items() if not m.get("error")]
    bad = [n for n, m in (hf.get("models") or {}).items() if m.get("error")]
    return (f" — transformers {hf['transformers']}{''.join(', ' + e for e in extra)}"
            + (_("; models {names}", names=", ".join(f"`{n}" for n in names)) if names else "")
            + (_("; cannot build {names}", names=", ".join(f"`{n}`" for n in bad)) if bad
               else ""))


# Why messages stay unsent, by their last error: the admin's next step.
AUTH_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked",
               "token_expired", "not_allowed_token_type"}
STUCK_HINTS = {
    "auth": N_("Slack refuses the bot's token: check SLACK_BOT_TOKEN (revoked, expired or "
               "another app's) and restart the bot"),
    "missing_scope": N_("The bot's token lacks a scope: reinstall the app from manifest.yml"),
    "ratelimited": N_("Slack is rate limiting the bot: the messages go out as it allows"),
    "network": N_("The bot cannot reach Slack: check the bot host's network, and "
                  "status.slack.com"),
    "other": N_("The bot's log (lines from trialbot.outbox) has the details"),
}
NETWORK_SIGNS = ("URLError", "ConnectionError", "Timeout", "timed out", "OSError", "socket")


def stuck_hint(error: str | None) -> str:
    """What to check when messages wait with `error` as the last one."""
    error = error or ""
    key = ("auth" if error in AUTH_ERRORS else
           "ratelimited" if error in ("ratelimited", "rate_limited") else
           error if error in STUCK_HINTS else
           "network" if any(sign in error for sign in NETWORK_SIGNS) else "other")
    return _(STUCK_HINTS[key])


def stuck_text(stuck: list[Json], now: float, alert_minutes: float) -> str:
    """The admin's warning in `/trial workers`: messages unsent for longer than
    `alert_minutes` or refused for the bot's token (the store's rows, oldest
    first), the oldest's channel and its last error, and what to check."""
    first = stuck[0]
    error = (first["last_error"] or _("none yet"))[:120]  # not inside ngettext(): Babel
    # would then extract the singular alone
    refused = next((m["last_error"] for m in stuck if m["last_error"] in AUTH_ERRORS), None)
    if refused:  # no wait fixes it: raised at once, whatever the messages' age
        return ngettext(":rotating_light: Slack refuses the bot's token ({error}): {count} "
                        "message waits, to <#{channel}>, for {waited} min. {hint}.",
                        ":rotating_light: Slack refuses the bot's token ({error}): {count} "
                        "messages wait; the oldest, to <#{channel}>, for {waited} min. {hint}.",
                        len(stuck), error=refused, count=len(stuck), channel=first["channel"],
                        waited=int(max(0.0, now - first["created"]) // 60),
                        hint=stuck_hint(refused))
    return ngettext(":rotating_light: {count} message unsent for over {minutes} min: to "
                    "<#{channel}>, it has waited {waited} min (last error: {error}). {hint}.",
                    ":rotating_light: {count} messages unsent for over {minutes} min; the "
                    "oldest, to <#{channel}>, has waited {waited} min (last error: {error}). "
                    "{hint}.",
                    len(stuck), count=len(stuck), minutes=f"{alert_minutes:g}",
                    channel=first["channel"], waited=int(max(0.0, now - first["created"]) // 60),
                    error=error,
                    hint=stuck_hint(first["last_error"]))
