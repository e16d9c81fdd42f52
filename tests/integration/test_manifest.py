"""manifest.yml matches what the app handles (README, "Connect a Slack workspace")."""
from pathlib import Path

import yaml

from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from bot.slack.app import build_app, web_client

ROOT = Path(__file__).resolve().parents[2]


def test_manifest_commands_scopes_and_modes(tmp_path, fake_slack):
    m = yaml.safe_load((ROOT / "manifest.yml").read_text())
    commands = {c["command"]: c for c in m["features"]["slash_commands"]}
    assert set(commands) == {"/trial", "/plan"}
    assert all(c["usage_hint"] and c["url"].endswith("/slack/events") for c in commands.values())
    assert set(m["oauth_config"]["scopes"]["bot"]) == {
        "commands", "chat:write", "files:write", "usergroups:read",
        "channels:read", "groups:read", "im:read", "mpim:read", "im:write"}
    assert m["features"]["app_home"]["messages_tab_enabled"] is True  # DMs to a requester
    assert m["settings"]["socket_mode_enabled"] is True
    assert m["settings"]["interactivity"]["is_enabled"] is True

    import io

    from slack_bolt.request import BoltRequest

    from slackfake import signed_headers, slash_body
    rt = Runtime(str(tmp_path / "m.db"), "t", ConsoleTransport(io.StringIO(), False, str(tmp_path)))
    app = build_app(rt.ctx, web_client("xoxb-x", fake_slack.api_url), "secret")
    for name in commands:  # every manifest command has a listener that answers
        body = slash_body("help", command=name)
        headers = {k.lower(): [v] for k, v in signed_headers("secret", body).items()}
        resp = app.dispatch(BoltRequest(body=body, headers=headers))
        assert resp.status == 200, (name, resp.body)
