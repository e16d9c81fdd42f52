"""Modal submissions: the "Add to plan…" choice. A bad choice is answered in
the modal itself (response_action=errors), so nothing is tagged by mistake."""
from __future__ import annotations

from bot.trials import card, tags
from worker import i18n


def plan_modal_callback(ack, body, view, client, context) -> None:
    ctx, user = context["trialbot"], body["user"]["id"]
    job_id = int(view["private_metadata"])
    chosen = (view["state"]["values"].get("block", {}).get("choice", {})
              .get("selected_option") or {}).get("value", "")
    plan, _bar, block = chosen.partition("|")
    job = ctx.store.job(job_id)
    with i18n.using(ctx.store.channel_lang(job["channel"] if job else None)):
        try:
            text = tags.add(ctx, job_id, plan, block, user)
        except tags.TagError as exc:
            ack(response_action="errors", errors={"block": exc.message[:150]})
            return
    ack()
    client.chat_postEphemeral(channel=job["channel"], user=user, text=text)


def register(app) -> None:
    app.view(card.PLAN_MODAL)(plan_modal_callback)
