"""The Bolt app: Slack's half of `trialbot serve`. The listeners are named
callbacks (bot/slack/listeners/); each finds the core's Context in Bolt's
per-request context, put there by one middleware."""
from __future__ import annotations

import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from slack_bolt import App
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.middleware import Middleware
from slack_sdk import WebClient

from bot.delivery.outbox import error_class
from bot.slack import channels, groups, listeners
from bot.trials import command as trial_command

log = logging.getLogger("trialbot.slack")
LISTENER_THREADS = 64
CONTEXT_KEY = "trialbot"  # where the listeners find the Context in Bolt's context


def web_client(bot_token: str, api_url: str | None) -> WebClient:
    if api_url:
        return WebClient(token=bot_token, base_url=api_url.rstrip("/") + "/")
    return WebClient(token=bot_token)


class CountingClient(WebClient):
    """A WebClient that counts its failed calls by class (Slack's error code,
    ratelimited, http_NNN, network) for /metrics: the Bolt app's own calls
    (views.open, conversations.info, user groups, Socket Mode's connection)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._failed: dict[str, int] = {}
        self._lock = threading.Lock()

    def api_call(self, api_method: str, **kwargs):
        try:
            return super().api_call(api_method, **kwargs)
        except Exception as exc:  # noqa: BLE001 - counted, then raised as it was
            name = error_class(exc)
            with self._lock:
                self._failed[name] = self._failed.get(name, 0) + 1
            raise

    def failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self._failed)

    def sharing(self, **settings) -> CountingClient:
        """Another client (its own token, timeout or retries) counted here too."""
        other = CountingClient(**{"token": self.token, "base_url": self.base_url,
                                  "timeout": self.timeout,
                                  "retry_handlers": self.retry_handlers, **settings})
        other._failed, other._lock = self._failed, self._lock
        return other


class WithContext(Middleware):
    """Puts the core's Context in each request's Bolt context. A class, not a
    function: Bolt calls a function middleware through its argument injection,
    a tenth of a millisecond on every ack's path."""

    def __init__(self, ctx):
        self.ctx = ctx

    def process(self, *, req, resp, next):  # noqa: A002 - Bolt's own name
        req.context[CONTEXT_KEY] = self.ctx
        return next()


def _authorize(token: str | None, enterprise_id, team_id, user_id) -> AuthorizeResult:
    """Every request is for the one workspace whose bot token we hold."""
    return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, user_id=user_id,
                           bot_token=token)


def _know(ctx, client: CountingClient) -> None:
    """What only Slack knows, into the Context's SlackParts (its one mutable part)."""
    ctx.slack.failures = client.failures
    ctx.slack.members = groups.Members(client)  # user groups in the access policy
    for group in ctx.policy.run_usergroups | ctx.policy.admin_usergroups:
        ctx.slack.members.fetch(group)  # in the background: no command waits on Slack
    # Is the bot in the channel? Asked after the ack; then held trials go on.
    asking = client.sharing(timeout=channels.TIMEOUT, retry_handlers=[])
    ctx.slack.channels = channels.ChannelCheck(asking,
                                               functools.partial(trial_command.settle, ctx))
    ctx.slack.channels.resume(ctx.store.held_channels())  # held when the bot last stopped


def build_app(ctx, client: WebClient, signing_secret: str | None) -> App:
    """The Bolt app over `ctx`, whose SlackParts gain what only Slack knows:
    user groups (for access rules), whether the bot can post in a channel, and
    the app's failed calls. Its calls go through a CountingClient over
    `client`'s token, URL and retry handlers."""
    client = CountingClient(token=client.token, base_url=client.base_url,
                            timeout=client.timeout, retry_handlers=client.retry_handlers)
    _know(ctx, client)
    # Bolt's single-workspace authorization calls auth.test at start-up (or, with
    # token verification off, on the first request: on its ack's path, and a
    # failure there refuses the command). Our own `authorize` answers with the
    # token we have and calls nothing: a Slack outage never stops the bot from
    # starting nor answering (messages wait in the outbox instead).
    # Bolt runs listeners on a pool of 5 threads by default; a burst of slash
    # commands then queues behind it. Listeners here only touch SQLite, so more
    # threads cost little (scripts/bench_trial_loop.py measures the burst).
    # (Bolt's own client carries no token: each request's client takes authorize's.)
    app = App(client=client.sharing(token=None),
              signing_secret=signing_secret or None,
              authorize=functools.partial(_authorize, client.token),
              # Run each listener in the request's own thread and answer when it
              # returns: ours only touch SQLite, and Bolt's other runner polls for
              # the ack in 10 ms sleeps (scripts/bench_load.py measures both).
              process_before_response=True,
              request_verification_enabled=bool(signing_secret),
              # The app subscribes to no events (manifest.yml): their middleware is
              # work on every ack's path for nothing.
              ignoring_self_events_enabled=False, url_verification_enabled=False,
              attaching_function_token_enabled=False,
              listener_executor=ThreadPoolExecutor(max_workers=LISTENER_THREADS))
    app.use(WithContext(ctx))
    listeners.register(app)

    @app.error
    def on_error(error, body):
        log.error("listener failed: %s (request type %s)", error, body.get("type"))

    return app
