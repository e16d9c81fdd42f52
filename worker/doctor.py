"""`trialbot-worker doctor`: is this box ready to serve a bot? One line per
check, each failing one saying how to fix it; the exit code has one bit per
class of failure (worker/doctor_checks.py, docs/doctor.md).

    trialbot-worker doctor [--server URL] [--token-file FILE | --token T] [--name NAME]
        [--recipes FILE] [--workdir DIR]     (env TRIALBOT_SERVER, TRIALBOT_WORKER_TOKEN)
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile

from worker import doctor_checks as checks
from worker.i18n import _


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 2 would read as "bot unreachable"
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(checks.USAGE)


def main(argv: list[str]) -> int:
    parser = _Parser(prog="trialbot-worker doctor",
                     description=_("Check this box for a trialbot worker: torch, GPUs, the "
                                   "bot, the token, the clock, recipes, disk. Runs no trial."))
    parser.add_argument("--server", default=os.environ.get("TRIALBOT_SERVER"),
                        help=_("the bot's URL (env TRIALBOT_SERVER)"))
    parser.add_argument("--token-file", metavar="FILE", help=_("the worker token's file"))
    parser.add_argument("--token", help=_("the worker token (or env TRIALBOT_WORKER_TOKEN)"))
    parser.add_argument("--ca-file", metavar="FILE", default=os.environ.get("TRIALBOT_CA_FILE"),
                        help=_("for an https:// bot: the CA bundle that signed its certificate "
                             "(env TRIALBOT_CA_FILE), as for the worker"))
    parser.add_argument("--name", default=socket.gethostname(),
                        help=_("the worker's name (a per-worker token is checked against it)"))
    parser.add_argument("--recipes", help=_("the recipe file (TOML) the worker would load"))
    parser.add_argument("--workdir", default=tempfile.gettempdir(),
                        help=_("where to check free disk (default: TMPDIR, trials' scratch)"))
    # The worker's other options (--label, --executor ...) may follow: not checked here.
    args, rest = parser.parse_known_args(argv)
    lines = run(args)
    if rest:
        lines.append(checks.Line("skip", "options", _(
            "Not checked by the doctor: {options}.", options=" ".join(rest))))
    print(render(lines))
    return exit_code(lines)


def run(args) -> list[checks.Line]:
    token, token_lines = _token(args)
    torch = checks.torch_lines()
    gpus = checks.gpu_lines()
    gpu_ok = all(line.status == "ok" for line in torch + gpus)
    bot = checks.bot_lines(args.server, token, args.name, args.ca_file)
    if token is None and token_lines:  # the token could not be read: that is its line
        bot = [token_lines[0] if line.what == "token" else line for line in bot]
    else:
        bot += token_lines  # a warning about the file
    return (torch + gpus + bot + checks.recipe_lines(args.recipes, gpu_ok)
            + checks.disk_lines(args.workdir))


def _token(args) -> tuple[str | None, list[checks.Line]]:
    """The token as the worker reads it; a source it cannot read is a failed line."""
    from worker import secrecy
    if args.token_file and args.token:
        return None, [checks.Line("fail", "token", _(
            "Both `--token-file` and `--token` given. Fix: give the token once."), checks.TOKEN)]
    if args.token_file:
        try:
            token, warning = secrecy.read_file(args.token_file)
        except secrecy.TokenError as exc:
            return None, [checks.Line("fail", "token", _(
                "The token file cannot be used: {error}. Fix: point `--token-file` at a file "
                "this user can read that holds only the token (mode 600).", error=str(exc)),
                checks.TOKEN)]
        return token, [checks.Line("warn", "token", warning)] if warning else []
    return args.token or os.environ.get("TRIALBOT_WORKER_TOKEN"), []


def render(lines: list[checks.Line]) -> str:
    out = [_("trialbot-worker doctor on {host}:", host=socket.gethostname())]
    out += [f"{_(checks.STATUS[line.status]):<5} {line.what:<8} {line.text}" for line in lines]
    failed = [line for line in lines if line.status == "fail"]
    code = exit_code(lines)
    out.append(_("Failed checks: {n}; exit code {code} (docs/doctor.md).", n=len(failed),
                 code=code) if failed else _("Every check passed."))
    return "\n".join(out)


def exit_code(lines: list[checks.Line]) -> int:
    code = checks.OK
    for line in lines:
        if line.status == "fail":
            code |= line.code
    return code
