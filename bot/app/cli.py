"""`trialbot`: `serve` (Slack), `console` (terminal), the admin commands
`worker-token` and `backup` (bot/app/admin.py), which work while the bot runs,
and `doctor` (bot/app/doctor.py), which checks what `serve` would use."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time

from worker.i18n import _


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        import slack_bolt  # noqa: F401
        import sqlite_utils  # noqa: F401
    except ImportError as exc:
        print(f"trialbot: {exc.name} is not installed; install the bot with "
              "`pip install -e '.[bot]'`", file=sys.stderr)
        return 2
    from bot.store.migrations import SchemaTooNew
    embedded = _embedded(args)
    if embedded is None:
        return 2
    user, recipes = embedded
    if args.command == "doctor":
        from bot.app import doctor
        return doctor.run(os.environ)
    try:
        if args.command in ("worker-token", "backup"):
            from bot.app import admin
            if args.command == "backup":
                return admin.run_backup(args.db, args.path, args.force)
            return admin.worker_token(args.db, args.action, args.name)
        if args.command == "console":
            return _console(args, user, recipes)
        return run_serve(args.local_worker, user, recipes)
    except SchemaTooNew as exc:
        print(f"trialbot: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"trialbot: cannot use the database: {exc} (set --db or TRIALBOT_DB to a "
              "writable file)", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialbot", description="Measure before you rent.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the Slack app, the worker API and /healthz")
    serve.add_argument("--local-worker", action="store_true",
                       help="also run a worker on this machine")
    trial_user = ("run the local worker's trials as USER (the bot runs as root), so they "
                  "cannot read the bot's tokens, memory or database")
    serve.add_argument("--trial-user", metavar="USER", help=trial_user)
    from worker.api import offer
    recipes_help = "recipe file (TOML) of commands the local worker may run"
    offer.add_options(serve, recipes_help)
    console = sub.add_parser("console", help="run commands in this terminal with a local worker")
    console.add_argument("--db", default=os.environ.get("TRIALBOT_DB", "./trialbot.db"),
                         help="SQLite file (default ./trialbot.db)")
    console.add_argument("--json", action="store_true",
                         help="print each message as the JSON payload sent to Slack")
    console.add_argument("--trial-user", metavar="USER", help=trial_user)
    offer.add_options(console, recipes_help)
    db_help = "the bot's SQLite file (default TRIALBOT_DB or ./trialbot.db)"
    default_db = os.environ.get("TRIALBOT_DB", "./trialbot.db")
    tok = sub.add_parser("worker-token", help="create, revoke or list per-worker API tokens")
    tok.add_argument("action", choices=("create", "revoke", "list"))
    tok.add_argument("name", nargs="?", help="the worker's name (--name of trialbot-worker)")
    tok.add_argument("--db", default=default_db, help=db_help)
    bak = sub.add_parser("backup", help="copy the live database (SQLite online backup)")
    bak.add_argument("path", help="the backup file to write")
    bak.add_argument("--force", action="store_true", help="replace PATH if it exists")
    bak.add_argument("--db", default=default_db, help=db_help)
    sub.add_parser("doctor", help="check the settings, Slack, the database and the workers, "
                   "with serve's environment (docs/doctor.md)")
    return parser


def _embedded(args) -> tuple | None:
    """(trial user, recipes) of the worker `serve --local-worker` and `console`
    run inside the bot; None after refusing options given without one."""
    user, recipes = None, {}
    if args.command in ("serve", "console"):
        from worker.api import secrecy
        # Slack tokens sit in our environment and memory, and a local worker's
        # trials run as our user: they must not read either.
        hidden = secrecy.undumpable()
        if args.command == "serve" and not args.local_worker:
            given = [f for f, v in (("--trial-user", args.trial_user),
                                    ("--recipes", args.recipes), ("--models", args.models),
                                    ("--hub", args.hub)) if v]
            if given:
                print(f"trialbot serve: {given[0]} is for the trials of --local-worker; give "
                      f"both, or start a trialbot-worker with {given[0]}", file=sys.stderr)
                return None
        if args.command == "console" or args.local_worker:
            _language_first()
            user = embedded_trial_user(args.command, args.trial_user, hidden)
            recipes = embedded_offer(args.command, args)
    return user, recipes


def _language_first() -> None:
    """TRIALBOT_LANG before the local worker's --trial-user and recipe file are
    read, so their refusals are in it; a wrong code is refused later, where each
    command reads its settings (serve's with tokens redacted)."""
    from bot.app import config
    from worker import i18n
    with contextlib.suppress(config.ConfigError):
        i18n.set_default(config.default_lang(os.environ))


def _console(args, user, recipes) -> int:
    from bot.app import config
    from bot.app import console as console_mod
    from worker import i18n
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        i18n.set_default(config.default_lang(os.environ))
    except config.ConfigError as exc:
        print(f"trialbot console: {exc}", file=sys.stderr)
        return 2
    return console_mod.run(args.db, args.json, user=user, recipes=recipes)


def embedded_trial_user(command: str, name: str | None, hidden: bool):
    """The local worker's --trial-user (exit 2 when refused), after warning what
    its trials could still read of the bot."""
    from worker.api import trialuser
    try:
        user = trialuser.lookup(name) if name else None
    except trialuser.TrialUserError as exc:
        print(f"trialbot {command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for warning in trialuser.warnings(user, hidden, None) if user else []:
        print(f"trialbot {command}: " + _("warning: {message}", message=warning),
              file=sys.stderr)
    return user


def embedded_offer(command: str, args) -> dict:
    """The local worker's recipes (exit 2 naming the line or directory that is
    wrong, as trialbot-worker does), and its --models and --hub set for its
    trials."""
    from worker.api import offer
    try:
        recipes = offer.recipes(args.recipes)
        offer.check_models(args.models)
    except offer.StartError as exc:
        print(f"trialbot {command}: " + _("refusing to start: {why}", why=exc),
              file=sys.stderr)
        raise SystemExit(2) from None
    offer.allow_models(args.models, args.hub)
    return recipes


def run_serve(local_worker: bool, user=None, recipes=None) -> int:
    from bot.app import config
    try:
        settings = config.from_env(os.environ)
    except config.ConfigError as exc:
        from worker.api import redact_text as text  # a token pasted into the wrong variable
        print(f"trialbot serve: {text(str(exc), ())}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from worker.api import redact
    redact.install(redact.secret_values(settings.bot_token, settings.app_token,
                                        settings.signing_secret, settings.worker_token,
                                        settings.metrics_token))
    from worker import i18n
    i18n.set_default(settings.lang)
    from bot.app.runtime import Runtime
    from bot.slack.app import build_app, web_client
    from bot.slack.transport import SlackTransport

    client = web_client(settings.bot_token, settings.api_url)
    try:
        rt = Runtime(settings.db, settings.worker_token, SlackTransport(client),
                     settings.host, settings.port, settings.lease_seconds, settings.policy,
                     settings.metrics_token, settings.outbox_alert_minutes)
    except OSError as exc:
        print(f"trialbot serve: cannot listen on {settings.host}:{settings.port}: {exc.strerror}"
              " (set TRIALBOT_PORT / TRIALBOT_HOST)", file=sys.stderr)
        return 2
    from worker.api import Signals
    signals = Signals()  # SIGTERM (docker stop, systemd) and Ctrl-C: one path, _stop
    app = build_app(rt.ctx, client, settings.signing_secret)
    log = logging.getLogger("trialbot")
    if settings.app_token:  # settings.socket_mode, the token narrowed to a str
        from slack_sdk.errors import SlackApiError

        from bot.slack.socketmode import Handler
        from bot.trials.workerlist import AUTH_ERRORS
        handler = Handler(app, settings.app_token)
        try:
            handler.connect()
            log.info("Slack: Socket Mode connected")
        except SlackApiError as exc:
            if exc.response.get("error") in AUTH_ERRORS:
                print(f"trialbot serve: Slack refused SLACK_APP_TOKEN "
                      f"({exc.response.get('error')}); create an app-level token with "
                      "connections:write", file=sys.stderr)
                return 2
            _connect_later(handler, log, exc)
        except OSError as exc:  # Slack unreachable: serve workers now, connect when it answers
            _connect_later(handler, log, exc)
    else:
        rt.server.bolt_app = app
        log.info("Slack: HTTP mode at %s/slack/events", rt.server.url)
    rt.start()
    if local_worker:
        rt.start_local_worker(user=user, recipes=recipes)
    log.info("listening on %s (worker API, /healthz, /metrics)", rt.server.url)
    return _stop(rt, signals, signals.next(), log)


def _stop(rt, signals, name: str, log) -> int:
    """Stop on the first SIGTERM or Ctrl-C: no new work, the Slack calls in
    flight complete and are marked sent, exit 0. A second signal exits at once
    (1): a call cut off then may be sent again after the restart."""
    log.info("%s: stopping; Slack calls in flight complete first", name)
    stopper = threading.Thread(target=rt.stop, args=(name,), name="stop")
    stopper.start()
    while stopper.is_alive():
        again = signals.next(timeout=0.1)
        if again:
            log.warning("%s again: exiting now, without waiting for Slack", again)
            logging.shutdown()
            os._exit(1)
    log.info("stopped")
    return 0


def _connect_later(handler, log, first_error) -> None:
    def retry():
        delay = 2.0
        while True:
            time.sleep(delay)
            try:
                handler.connect()
                log.info("Slack: Socket Mode connected")
                return
            except Exception as exc:  # noqa: BLE001 - keep trying; the outbox keeps messages
                log.warning("Slack: Socket Mode connect failed (%s); retrying in %.0f s",
                            exc, delay)
                delay = min(delay * 2, 300)
    log.warning("Slack: Socket Mode connect failed (%s); serving workers and retrying",
                first_error)
    threading.Thread(target=retry, daemon=True, name="socket-mode-connect").start()


if __name__ == "__main__":
    sys.exit(main())
