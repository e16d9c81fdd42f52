"""Keeping the worker's token from the trials it runs.

A trial is code from the internet running on this box. The token reaches the
worker by `--token-file`, the environment or `--token`; then:

- the process is made non-dumpable (PR_SET_DUMPABLE 0): its /proc/PID/environ,
  mem, maps and fd become root's, so a trial of the same user cannot read
  them (root still can: hence `--trial-user`);
- a token that came in the environment or on the command line is handed to a
  fresh image of the worker through a pipe (`hand_over`): unsetenv does not
  change /proc/PID/environ, and /proc/PID/cmdline is world-readable.
"""
from __future__ import annotations

import ctypes
import os
import stat
import sys

from worker.i18n import _
from worker.redact import ENV_SECRETS

PR_SET_DUMPABLE = 4
HANDED = "TRIALBOT_TOKEN_FD"  # set only by hand_over: the pipe the token waits in
MAX_TOKEN = 4096


class TokenError(Exception):
    """A token source the worker refuses; the message says how to fix it."""


def undumpable() -> bool:
    """Make this process non-dumpable (Linux); False where that is not possible.
    Children get their own dumpable flag back at exec."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def read_file(path: str) -> tuple[str, str | None]:
    """The token in `path`, and a warning when others may read the file."""
    try:
        with open(path, "rb") as f:  # a pipe is fine too: --token-file <(pass show worker)
            info = os.fstat(f.fileno())
            raw = f.read(MAX_TOKEN + 1)
    except FileNotFoundError:
        raise TokenError(_("--token-file {path}: no such file; give the file that holds "
                           "the token", path=path)) from None
    except PermissionError:
        raise TokenError(_("--token-file {path}: this user may not read it (chown it to the "
                           "worker's user, mode 600)", path=path)) from None
    except IsADirectoryError:
        raise TokenError(_("--token-file {path} is a directory; name the file that holds "
                           "the token", path=path)) from None
    except OSError as exc:
        raise TokenError(_("--token-file {path}: {why}", path=path, why=exc.strerror)) from None
    token = raw.decode(errors="replace").strip()
    if not token:
        raise TokenError(_("--token-file {path} is empty; write the worker's token into it",
                           path=path))
    if len(raw) > MAX_TOKEN or any(c.isspace() for c in token):
        raise TokenError(_("--token-file {path} holds more than one token; it must hold only "
                           "the token (one line)", path=path))
    loose = stat.S_ISREG(info.st_mode) and info.st_mode & 0o077
    warning = _("--token-file {path} may be read by other users (mode {mode}): "
                "`chmod 600 {path}`", path=path,
                mode=f"{stat.S_IMODE(info.st_mode):03o}") if loose else None
    return token, warning


def handed_over() -> str | None:
    """The token a previous image of this process left in its pipe, if any."""
    fd = os.environ.pop(HANDED, None)
    if fd is None:
        return None
    try:
        with os.fdopen(int(fd), "rb") as pipe:
            return pipe.read(MAX_TOKEN).decode()
    except (OSError, ValueError):
        return None


def needs_hand_over(argv: list[str]) -> bool:
    """True when the token (or another known secret) is in our environment or argv."""
    return any(n in os.environ for n in ENV_SECRETS) or any(
        a == "--token" or a.startswith("--token=") for a in argv)


def hand_over(token: str, argv: list[str]) -> None:
    """Exec this program again, same pid, with `argv` less `--token VALUE` and
    the environment less its secrets; the token waits in an inherited pipe.
    Until the new image's first call, undumpable(), a process of our user
    could read that pipe through /proc/PID/fd: no trial of ours runs yet."""
    clean, skip = [], False  # argparse takes no other spelling: --tok clashes with --token-file
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--token":
            skip = True
        elif not arg.startswith("--token="):
            clean.append(arg)
    read, write = os.pipe()
    os.write(write, token.encode())  # far below the pipe's buffer: never blocks
    os.close(write)
    os.set_inheritable(read, True)
    env = {k: v for k, v in os.environ.items() if k not in ENV_SECRETS}
    env[HANDED] = str(read)
    # sys.argv[1:] is the tail of orig_argv; what precedes it starts this program
    # (`python bin/trialbot-worker` or `python -m worker.cli`).
    start = sys.orig_argv[:len(sys.orig_argv) - len(sys.argv) + 1]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, start + clean, env)
