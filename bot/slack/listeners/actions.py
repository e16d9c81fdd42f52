"""Buttons on a trial's card: Cancel, Re-run, Add to plan…. Each acks, calls
the core and answers the clicking user only (ephemeral), in the language of
the channel the card is in."""
from __future__ import annotations

from bot.trials import card, tags
from bot.trials import command as trial_command
from worker import i18n
from worker.i18n import _


def _say(respond, text: str) -> None:
    respond(response_type="ephemeral", replace_original=False, text=text)


def _language(context, body):
    channel = (body.get("channel") or {}).get("id")
    return i18n.using(context["trialbot"].store.channel_lang(channel))


def cancel_callback(ack, body, action, respond, context) -> None:
    ack()
    with _language(context, body):
        try:
            text = _(":no_entry_sign: {answer}.", answer=trial_command.cancel(
                context["trialbot"], int(action["value"]), body["user"]["id"]))
        except ValueError as exc:
            text = _(":x: {error}.", error=exc)
    _say(respond, text)


def rerun_callback(ack, body, action, respond, context) -> None:
    ack()
    ts = ((body.get("container") or {}).get("message_ts")
          or (body.get("message") or {}).get("ts"))
    clicked = ts and f"{(body.get('channel') or {}).get('id')}:{ts}"
    with _language(context, body):
        reply = trial_command.rerun(context["trialbot"], int(action["value"]),
                                    body["user"]["id"], body.get("trigger_id"),
                                    body.get("response_url"), clicked)
    _say(respond, reply["text"])


def add_to_plan_callback(ack, body, action, client, respond, context) -> None:
    ack()
    ctx, user = context["trialbot"], body["user"]["id"]
    with _language(context, body):
        job = ctx.store.job(int(action["value"]))
        if job is None:
            _say(respond, _(":x: There is no trial T{id} any more.", id=action["value"]))
            return
        refused = ctx.allows("run", user, job["channel"], "change plans")
        if refused:  # the modal's submission checks again
            _say(respond, _(":lock: {refused} Nothing was changed.", refused=refused))
            return
        choices = tags.choices(ctx, user, job["channel"])
        if not choices:
            _say(respond, _(":x: No plan of this channel has a block yet: start one with "
                            "`/plan new NAME` and `/plan NAME block KIND ...`."))
            return
        view = card.plan_modal(job, choices)
    client.views_open(trigger_id=body["trigger_id"], view=view)


def register(app) -> None:
    app.action(card.CANCEL)(cancel_callback)
    app.action(card.RERUN)(rerun_callback)
    app.action(card.ADD_TO_PLAN)(add_to_plan_callback)
