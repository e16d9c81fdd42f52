"""What a Slack listener does after its ack, and the ack's write budget.

With process_before_response (bot/slack/app.py) Bolt answers Slack when the
listener returns, so anything that waits on Slack's Web API (respond,
chat.postEphemeral) is handed to this pool and the listener returns at once.
Bolt's own lazy listeners would do the same, but they run on a deep copy of
the request without the Context our middleware puts in it."""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("trialbot.slack")

# A listener's writes wait at most this long in all for the database (Store.budget):
# Slack shows the user an error at 3 s, and its own round trip takes some of them.
ACK_WRITE_SECONDS = 1.5
THREADS = 8

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="after-ack")


def later(fn, *args, **kwargs) -> Future:
    """Run fn(*args, **kwargs) after the ack; a failure is logged."""
    def run():
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.exception("after the ack: %s failed", getattr(fn, "__name__", fn))
            raise
    return _pool.submit(run)
