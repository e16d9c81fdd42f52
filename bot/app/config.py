"""Settings for `trialbot serve`, from the environment; and the access policy
(bot/access.py) from the environment and an [access] table in TRIALBOT_CONFIG."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from bot.access import Policy
from worker import i18n


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
    policy: Policy | None = None  # who may run, who is an admin
    lang: str = "en"  # TRIALBOT_LANG: messages where no channel chose (`/plan settings`)
    metrics_token: str | None = None  # TRIALBOT_METRICS_TOKEN: /metrics without the worker token
    outbox_alert_minutes: float = 5  # TRIALBOT_OUTBOX_ALERT_MINUTES

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
    try:
        alert = float(env.get("TRIALBOT_OUTBOX_ALERT_MINUTES", "5"))
        assert 1 <= alert <= 7 * 24 * 60
    except (ValueError, AssertionError):
        raise ConfigError(f"TRIALBOT_OUTBOX_ALERT_MINUTES="
                          f"{env.get('TRIALBOT_OUTBOX_ALERT_MINUTES')!r} must be minutes from 1 "
                          "to 10080 (a week)") from None
    policy = load_access(env)
    lang = default_lang(env)
    return Settings(
        bot_token=env["SLACK_BOT_TOKEN"], app_token=env.get("SLACK_APP_TOKEN") or None,
        signing_secret=env.get("SLACK_SIGNING_SECRET") or None,
        worker_token=env["TRIALBOT_WORKER_TOKEN"], db=env.get("TRIALBOT_DB", "./trialbot.db"),
        host=env.get("TRIALBOT_HOST", "0.0.0.0"), port=port,
        api_url=env.get("SLACK_API_URL") or None, lease_seconds=lease, policy=policy,
        lang=lang, metrics_token=env.get("TRIALBOT_METRICS_TOKEN") or None,
        outbox_alert_minutes=alert)


def default_lang(env) -> str:
    """TRIALBOT_LANG (en when unset), checked: every adapter reads it here."""
    try:
        return i18n.language(env.get("TRIALBOT_LANG") or i18n.DEFAULT)
    except i18n.LanguageError as exc:
        raise ConfigError(f"TRIALBOT_LANG: {exc.message}") from None


# The access policy: environment variables, and an [access] table in TRIALBOT_CONFIG.
# A variable that is set replaces the file's key of the same meaning.

ENV = {"run_users": "TRIALBOT_RUN_USERS", "run_usergroups": "TRIALBOT_RUN_USERGROUPS",
       "run_channels": "TRIALBOT_RUN_CHANNELS", "admins": "TRIALBOT_ADMINS",
       "admin_usergroups": "TRIALBOT_ADMIN_USERGROUPS", "run_everyone": "TRIALBOT_RUN_EVERYONE"}
KINDS = {"run_users": ("a Slack user id", "UW", "U0123ABCD"),
         "admins": ("a Slack user id", "UW", "U0123ABCD"),
         "run_usergroups": ("a Slack user group id", "S", "S0123ABCD"),
         "admin_usergroups": ("a Slack user group id", "S", "S0123ABCD"),
         "run_channels": ("a Slack channel id", "CG", "C0123ABCD")}
ID = re.compile(r"[A-Z][A-Z0-9]+")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def load_access(env) -> Policy:
    """The policy from `env` (a mapping); raises ConfigError in one line."""
    raw = _file(env["TRIALBOT_CONFIG"]) if env.get("TRIALBOT_CONFIG") else {}
    where = {key: f"TRIALBOT_CONFIG={env.get('TRIALBOT_CONFIG')} [access] {key}"
             for key in raw}
    for key, name in ENV.items():
        value = (env.get(name) or "").strip()
        if value:
            raw[key], where[key] = value, name
            if key != "run_everyone":
                raw[key] = [v.strip() for v in value.split(",") if v.strip()]
    out: dict[str, Any] = {}  # Policy's fields: run_everyone a bool, the rest frozensets
    for key, value in raw.items():
        if key == "run_everyone":
            out[key] = _flag(value, where[key])
            continue
        what, first, example = KINDS[key]
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where[key]}: give a list of ids, e.g. [\"{example}\"]")
        bad = [v for v in value if not (ID.fullmatch(v) and v[0] in first)]
        if bad:
            starts = " or ".join(f"{c}…" for c in first)
            raise ConfigError(f"{where[key]}: {bad[0]!r} is not {what} ({starts}); give ids "
                              f"separated by commas, e.g. {example}")
        out[key] = frozenset(value)
    return Policy(**out)


def _file(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"TRIALBOT_CONFIG={path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"TRIALBOT_CONFIG={path}: not valid TOML: {exc}") from None
    table = data.get("access", {})
    if not isinstance(table, dict):
        raise ConfigError(f"TRIALBOT_CONFIG={path}: `access` must be a table [access]")
    unknown = sorted(set(table) - set(ENV))
    if unknown:
        raise ConfigError(f"TRIALBOT_CONFIG={path}: unknown key `{unknown[0]}` in [access]; "
                          f"known: {', '.join(ENV)}")
    return dict(table)


def _flag(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in TRUE + FALSE:
        return value.lower() in TRUE
    raise ConfigError(f"{where}: {value!r} is not true or false (1 or 0)")
