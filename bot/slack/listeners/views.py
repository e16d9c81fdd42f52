"""Modal submissions: the "Add to plan…" choice. A bad choice is answered in
the modal itself (response_action=errors), so nothing is tagged by mistake."""
from __future__ import annotations

from bot.trials import trial_command, trialcard
from bot.plans import plan_command


def register(app, queue) -> None:
    @app.view(trialcard.PLAN_MODAL)
    def add_to_plan(ack, body, view, client):
        job_id = int(view["private_metadata"])
        chosen = (view["state"]["values"].get("block", {}).get("choice", {})
                  .get("selected_option") or {}).get("value", "")
        plan, _, block = chosen.partition("|")
        try:
            text = trial_command.add_to_plan(queue, job_id, plan, block, body["user"]["id"])
        except plan_command.PlanError as exc:
            ack(response_action="errors", errors={"block": exc.message[:150]})
            return
        ack()
        job = queue.store.job(job_id)
        client.chat_postEphemeral(channel=job["channel"], user=body["user"]["id"], text=text)
