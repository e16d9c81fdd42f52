"""Settings for `trialbot serve`, from the environment."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    bot_token: str
    app_token: str | None
    signing_secret: str | None
    worker_token: str
    db: str
    host: str
    port: int
    api_url: str | None
    lease_seconds: float
    policy: object = None  # access.Policy: who may run, who is an admin

    @property
    def socket_mode(self) -> bool:
        return bool(self.app_token)


class ConfigError(Exception):
    pass


def from_env(env) -> Settings:
    """Raises ConfigError naming every missing or bad variable."""
    socket_mode = bool(env.get("SLACK_APP_TOKEN"))
    required = ["SLACK_BOT_TOKEN", "TRIALBOT_WORKER_TOKEN"]
    if not socket_mode:
        required.append("SLACK_SIGNING_SECRET")
    missing = [name for name in required if not env.get(name)]
    if missing:
        mode = "Socket Mode" if socket_mode else "HTTP mode (no SLACK_APP_TOKEN)"
        raise ConfigError(f"missing {', '.join(missing)} for {mode}; see README "
                          "'Connect a Slack workspace'")
    try:
        port = int(env.get("TRIALBOT_PORT", "3000"))
        assert 0 <= port < 65536
    except (ValueError, AssertionError):
        raise ConfigError(f"TRIALBOT_PORT={env.get('TRIALBOT_PORT')!r} is not a port "
                          "number (0-65535)") from None
    try:
        lease = float(env.get("TRIALBOT_LEASE_SECONDS", "60"))
        assert 1 <= lease <= 3600
    except (ValueError, AssertionError):
        raise ConfigError(f"TRIALBOT_LEASE_SECONDS={env.get('TRIALBOT_LEASE_SECONDS')!r} must "
                          "be seconds from 1 to 3600") from None
    from bot import access  # it raises ConfigError from here
    policy = access.load(env)
    return Settings(
        bot_token=env["SLACK_BOT_TOKEN"], app_token=env.get("SLACK_APP_TOKEN") or None,
        signing_secret=env.get("SLACK_SIGNING_SECRET") or None,
        worker_token=env["TRIALBOT_WORKER_TOKEN"], db=env.get("TRIALBOT_DB", "./trialbot.db"),
        host=env.get("TRIALBOT_HOST", "0.0.0.0"), port=port,
        api_url=env.get("SLACK_API_URL") or None, lease_seconds=lease, policy=policy)
