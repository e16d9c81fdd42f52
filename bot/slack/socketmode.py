"""Socket Mode through slack_sdk's built-in client, with a short read timeout.

The client reads each connection on one thread, and leaves an old connection
only when its blocked read times out: 3 s by default, Slack's whole ack budget.
So after a `refresh_requested` the first command on the new socket was acked
at 2.8-3.1 s (docs/operations.md). A 1 s read timeout bounds that wait to 1 s;
the read loop just wakes more often."""
from __future__ import annotations

from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk.socket_mode.builtin import SocketModeClient

READ_TIMEOUT = 1.0  # seconds a read on an idle socket blocks
PING_INTERVAL = 5.0  # seconds: how soon a silently dropped socket is noticed


class PromptClient(SocketModeClient):
    def connect(self) -> None:
        super().connect()
        session = self.current_session
        if session is not None and session.sock is not None:
            session.sock.settimeout(READ_TIMEOUT)


class Handler(SocketModeHandler):
    """Bolt's handler over PromptClient (Bolt builds its own client in
    __init__, with no way to pass one in)."""

    def __init__(self, app, app_token: str):
        self.app, self.app_token = app, app_token
        self.client = PromptClient(app_token=app_token, logger=app.logger,
                                   web_client=app.client, proxy=app.client.proxy,
                                   ping_interval=PING_INTERVAL)
        # Bolt's handle takes the concrete client the list's type widens; Bolt ignores it alike
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]
