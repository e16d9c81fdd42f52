"""`trialbot doctor`'s Slack checks: `auth.test` with the bot token, the scopes
Slack says it has (the `x-oauth-scopes` header of every Web API answer) against
those manifest.yml asks for, and `apps.connections.open` with the app token,
whose URL is never opened. Through slack_sdk's WebClient, with SLACK_API_URL
as `trialbot serve` uses it."""
from __future__ import annotations

import logging
import urllib.error

from slack_sdk.errors import SlackApiError

from bot.app.doctorcodes import Exit, Line
from bot.slack.app import web_client
from bot.trials.workerlist import AUTH_ERRORS  # the codes that mean a bad token
from worker.i18n import _

# manifest.yml's bot scopes (tests/integration/test_bot_doctor.py holds the two equal): the
# manifest is not installed with the package.
MANIFEST_SCOPES = ("commands", "chat:write", "files:write", "usergroups:read", "channels:read",
                   "groups:read", "im:read", "mpim:read", "im:write")
TIMEOUT = 10  # seconds per call: the doctor answers in one screen, not after minutes


def slack_lines(token: str, app_token: str | None, api_url: str | None,
                policy) -> tuple[list, dict]:
    """The Slack lines, and the names of the access policy's channels (id -> name)
    where Slack gave them."""
    # slack_sdk logs a failed answer as an error; the doctor's line says it, once.
    logging.getLogger("slack_sdk").setLevel(logging.CRITICAL)
    client = web_client(token, api_url)
    client.timeout = TIMEOUT
    where = api_url or client.base_url
    try:
        answer = client.auth_test()
    except SlackApiError as exc:
        return [_refused(exc, "SLACK_BOT_TOKEN", where, Exit.SLACK_TOKEN).named("slack")], {}
    except (OSError, urllib.error.URLError) as exc:
        return [_unreachable(exc, where).named("slack")], {}
    lines = [Line(_("Slack accepts SLACK_BOT_TOKEN: bot {user} in workspace {team} ({url}).",
                    user=answer.get("user", "?"), team=answer.get("team", "?"),
                    url=answer.get("url", where)), check="slack")]
    lines.append(_scopes_line(answer.headers, policy).named("scopes"))
    if app_token:
        lines.append(_socket_line(app_token, api_url, where).named("socket"))
    return lines, _channel_names(client, policy)


def _scopes_line(headers: dict, policy):
    said = {k.lower(): v for k, v in (headers or {}).items()}.get("x-oauth-scopes")
    if said is None:
        return Line(_("Slack did not say which scopes the token has (no x-oauth-scopes header): "
                      "compare OAuth & Permissions with manifest.yml by hand."), warn=True)
    granted = {s.strip() for s in said.split(",") if s.strip()}
    missing = [s for s in MANIFEST_SCOPES if s not in granted]
    if not missing:
        return Line(_("The token has every scope manifest.yml asks for: {scopes}.",
                      scopes=", ".join(MANIFEST_SCOPES)))
    groups = policy is not None and (policy.run_usergroups or policy.admin_usergroups)
    if missing == ["usergroups:read"] and not groups:  # bot/slack/groups.py asks only then
        return Line(_("The token lacks usergroups:read, needed only when the access settings "
                      "name user groups; they name none."), warn=True)
    return Line(_("The token lacks scopes manifest.yml asks for: {missing}. Add them (update "
                  "the app from manifest.yml), then Reinstall to Workspace: a token keeps its "
                  "old grant until then (docs/operations.md says what each scope is for).",
                  missing=", ".join(missing)), Exit.SLACK_SCOPES)


def _socket_line(app_token: str, api_url: str | None, where: str):
    client = web_client(app_token, api_url)
    client.timeout = TIMEOUT
    try:
        answer = client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        return _refused(exc, "SLACK_APP_TOKEN", where, Exit.SOCKET_MODE)
    except (OSError, urllib.error.URLError) as exc:
        return _unreachable(exc, where)
    if not str(answer.get("url") or "").startswith(("ws://", "wss://")):
        return Line(_("Slack accepted SLACK_APP_TOKEN but offered no Socket Mode URL: turn "
                      "Socket Mode on in the app's settings (Socket Mode page)."),
                    Exit.SOCKET_MODE)
    return Line(_("Slack accepts SLACK_APP_TOKEN and offers a Socket Mode connection (not "
                  "opened)."))


def _refused(exc: SlackApiError, variable: str, where: str, failed):
    error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
    status = exc.response.status_code
    if status != 200:  # Slack answers its errors with 200; a 5xx or 429 is the service
        return Line(_("Slack answered HTTP {status} at {url}: it may be down "
                      "(https://slack-status.com), or SLACK_API_URL is not Slack's; try again "
                      "in a few minutes.", status=status, url=where), Exit.SLACK_UNREACHABLE)
    if variable == "SLACK_APP_TOKEN":
        return Line(_("Slack refuses SLACK_APP_TOKEN ({error}): create an app-level token "
                      "(xapp-…) with connections:write under Basic Information, App-Level "
                      "Tokens, and turn Socket Mode on.", error=error), failed)
    if error in AUTH_ERRORS:
        return Line(_("Slack refuses SLACK_BOT_TOKEN ({error}): copy the Bot User OAuth Token "
                      "(xoxb-…) from the app's OAuth & Permissions page into SLACK_BOT_TOKEN "
                      "and restart the bot.", error=error), failed)
    return Line(_("Slack refused auth.test ({error}): check that SLACK_BOT_TOKEN is this "
                  "app's bot token (xoxb-…).", error=error), failed)


def _unreachable(exc: Exception, where: str):
    reason = getattr(exc, "reason", None) or exc
    return Line(_("Slack is unreachable at {url} ({reason}): check this host's network, DNS "
                  "and proxy (HTTPS_PROXY), or SLACK_API_URL where it is set.", url=where,
                  reason=str(reason)), Exit.SLACK_UNREACHABLE)


def _channel_names(client, policy) -> dict:
    """`#ml-gpu` for C0123ABCD, where conversations.info answers (channels:read)."""
    names = {}
    for channel in sorted(policy.run_channels if policy else ()):
        try:
            name = client.conversations_info(channel=channel)["channel"].get("name")
        except Exception:  # noqa: BLE001 - a name is a courtesy: the id is shown instead
            continue
        if name:
            names[channel] = name
    return names
