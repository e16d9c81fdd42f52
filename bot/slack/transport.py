"""Slack as the outbox's transport: what each stored message becomes on
Slack's Web API, and Slack's refusals as `Undeliverable` for the outbox to sort."""
from __future__ import annotations

from bot.delivery.refusals import Undeliverable


class SlackTransport:
    """chat.postMessage, chat.update and files_upload_v2 through slack_sdk's
    WebClient (which honours 429 Retry-After through its
    RateLimitErrorRetryHandler); and the requester's own paths: an ephemeral
    message, the command's response_url, a direct message."""

    def __init__(self, client):
        from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
        client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=3))
        self.client = client
        self.ims: dict[str, str] = {}  # user -> their direct-message channel with the bot

    def send(self, payload: dict) -> str:
        from slack_sdk.errors import SlackApiError
        via = payload.get("via")
        try:
            if via == "response_url":
                return self._respond(payload)
            if via == "ephemeral":
                resp = self.client.chat_postEphemeral(channel=payload["channel"],
                                                      user=payload["user"], text=payload["text"],
                                                      blocks=payload.get("blocks") or None)
                return resp.get("message_ts") or "ephemeral"
            if via == "dm":
                payload = dict(payload, channel=self._im(payload["user"]))
            if payload.get("update"):  # replace an earlier message's text in place
                self.client.chat_update(channel=payload["channel"], ts=payload["ts"],
                                        text=payload["text"], blocks=payload.get("blocks"))
                return payload["ts"]
            if "content" in payload:  # a file into the thread
                resp = self.client.files_upload_v2(
                    channel=payload["channel"], thread_ts=payload.get("thread_ts"),
                    content=payload["content"], filename=payload["file"],
                    title=payload["text"], initial_comment=payload["text"])
                return resp["files"][0]["id"] if resp.get("files") else "file"
            post = {k: v for k, v in payload.items() if k not in ("via", "user", "url")}
            resp = self.client.chat_postMessage(**post)
        except SlackApiError as exc:
            error = exc.response.get("error", "")
            if error in ("invalid_blocks", "invalid_blocks_format") and payload.get("blocks"):
                # The text alone still says everything; send that rather than nothing.
                return self.send({k: v for k, v in payload.items() if k != "blocks"})
            if exc.response.status_code == 200 and error:
                raise Undeliverable(error) from exc
            raise
        return resp["ts"]

    def _im(self, user: str) -> str:
        if user not in self.ims:
            self.ims[user] = self.client.conversations_open(users=user)["channel"]["id"]
        return self.ims[user]

    def _respond(self, payload: dict) -> str:
        from slack_sdk.webhook import WebhookClient
        resp = WebhookClient(payload["url"], timeout=10).send(
            text=payload["text"], blocks=payload.get("blocks") or None,
            response_type="ephemeral", replace_original=False)
        if resp.status_code == 200:
            return "response_url"
        if 400 <= resp.status_code < 500 and resp.status_code != 429:
            raise Undeliverable((resp.body or "").strip()[:60] or f"http_{resp.status_code}")
        raise ConnectionError(f"response_url answered HTTP {resp.status_code}")
