"""Buttons on a trial's card: Cancel, Re-run, Add to plan…. Each acks, calls
the core and answers the clicking user only (ephemeral)."""
from __future__ import annotations

from bot.trials import trial_command, trialcard


def register(app, queue) -> None:
    @app.action(trialcard.CANCEL)
    def cancel(ack, body, action, respond):
        ack()
        try:
            text = f":no_entry_sign: {queue.cancel(int(action['value']), body['user']['id'])}."
        except ValueError as exc:
            text = f":x: {exc}."
        respond(response_type="ephemeral", replace_original=False, text=text)

    @app.action(trialcard.RERUN)
    def rerun(ack, body, action, respond):
        ack()
        ts = ((body.get("container") or {}).get("message_ts")
              or (body.get("message") or {}).get("ts"))
        card = ts and f"{(body.get('channel') or {}).get('id')}:{ts}"
        reply = trial_command.rerun(queue, int(action["value"]), body["user"]["id"],
                             body.get("trigger_id"), body.get("response_url"), card)
        respond(response_type="ephemeral", replace_original=False, text=reply["text"])

    @app.action(trialcard.ADD_TO_PLAN)
    def add_to_plan(ack, body, action, client, respond):
        ack()
        job = queue.store.job(int(action["value"]))
        refused = job and queue.allows("run", body["user"]["id"], job["channel"], "change plans")
        if refused:  # the modal's submission checks again
            respond(response_type="ephemeral", replace_original=False,
                    text=f":lock: {refused} Nothing was changed.")
            return
        choices = job and trial_command.plan_choices(queue, body["user"]["id"], job["channel"])
        if job is None or not choices:
            respond(response_type="ephemeral", replace_original=False,
                    text=":x: No plan of this channel has a block yet: start one with "
                         "`/plan new NAME` and `/plan NAME block KIND ...`." if job else
                         f":x: There is no trial T{action['value']} any more.")
            return
        client.views_open(trigger_id=body["trigger_id"], view=trialcard.plan_modal(job, choices))
