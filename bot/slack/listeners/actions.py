"""Buttons on a trial's card: Cancel, Re-run, Add to plan…. Each acks, calls
the core and answers the clicking user only (ephemeral)."""
from __future__ import annotations

from bot.trials import card, tags
from bot.trials import command as trial_command


def _say(respond, text: str) -> None:
    respond(response_type="ephemeral", replace_original=False, text=text)


def cancel_callback(ack, body, action, respond, context) -> None:
    ack()
    try:
        text = (":no_entry_sign: " + trial_command.cancel(context["trialbot"],
                                                           int(action["value"]),
                                                           body["user"]["id"]) + ".")
    except ValueError as exc:
        text = f":x: {exc}."
    _say(respond, text)


def rerun_callback(ack, body, action, respond, context) -> None:
    ack()
    ts = ((body.get("container") or {}).get("message_ts")
          or (body.get("message") or {}).get("ts"))
    clicked = ts and f"{(body.get('channel') or {}).get('id')}:{ts}"
    reply = trial_command.rerun(context["trialbot"], int(action["value"]), body["user"]["id"],
                                body.get("trigger_id"), body.get("response_url"), clicked)
    _say(respond, reply["text"])


def add_to_plan_callback(ack, body, action, client, respond, context) -> None:
    ack()
    ctx, user = context["trialbot"], body["user"]["id"]
    job = ctx.store.job(int(action["value"]))
    if job is None:
        _say(respond, f":x: There is no trial T{action['value']} any more.")
        return
    refused = ctx.allows("run", user, job["channel"], "change plans")
    if refused:  # the modal's submission checks again
        _say(respond, f":lock: {refused} Nothing was changed.")
        return
    choices = tags.choices(ctx, user, job["channel"])
    if not choices:
        _say(respond, ":x: No plan of this channel has a block yet: start one with "
                      "`/plan new NAME` and `/plan NAME block KIND ...`.")
        return
    client.views_open(trigger_id=body["trigger_id"], view=card.plan_modal(job, choices))


def register(app) -> None:
    app.action(card.CANCEL)(cancel_callback)
    app.action(card.RERUN)(rerun_callback)
    app.action(card.ADD_TO_PLAN)(add_to_plan_callback)
