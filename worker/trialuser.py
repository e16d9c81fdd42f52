"""`--trial-user USER`: trials (setup commands, recipes, built-in children)
run as USER, not as the worker.

Another uid may not open the worker's /proc/PID/{environ,mem,maps,fd}, nor a
token file of mode 600: this is what keeps the token from a trial when the
worker runs as root, which a root trial could otherwise read whole. The shim
(worker/shim.py --user) makes the switch; the worker hands USER the
per-trial directories it writes to.
"""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from dataclasses import dataclass

from worker.i18n import _


class TrialUserError(Exception):
    """A --trial-user the worker refuses; the message says how to fix it."""


@dataclass(frozen=True)
class TrialUser:
    name: str
    uid: int
    gid: int
    home: str

    def shim_args(self) -> list[str]:
        return ["--user", self.name]

    def own(self, directory: str) -> None:
        """Give USER a per-trial directory and what the worker wrote in it."""
        for path in [directory] + [os.path.join(directory, n) for n in os.listdir(directory)]:
            os.chown(path, self.uid, self.gid)


def lookup(name: str) -> TrialUser:
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        raise TrialUserError(_(
            "--trial-user {name}: no such user on this machine; create one (e.g. `useradd "
            "--system --create-home trialbot-trial`) or name an existing one", name=name)) from None
    if user.pw_uid == 0:
        raise TrialUserError(_("--trial-user {name} is root (uid 0): trials would run as "
                               "root; name an unprivileged user", name=name))
    if os.geteuid() != 0:
        raise TrialUserError(_(
            "--trial-user {name}: only a worker running as root can start trials as another "
            "user; run the worker as root with --trial-user, or as a dedicated user of its "
            "own without it", name=name))
    return TrialUser(name, user.pw_uid, user.pw_gid, user.pw_dir)


def warnings(user: TrialUser | None, hidden: bool, token_file: str | None,
             slurm: bool = False) -> list[str]:
    """What trials could still read of this worker, or what will not work for
    them as `user`; found before the first trial."""
    if user is not None:
        return _cannot(user)
    me = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        return [_("trials run as root (no --trial-user): a recipe can read this worker's "
                  "token, memory and every file on the machine; run trials as another user "
                  "with --trial-user USER")]
    if not hidden:
        return [_("this system cannot make the worker non-dumpable: trials run as {user} "
                  "and can read the token in its memory", user=me)]
    if token_file and slurm:
        return [_("Slurm jobs run as {user}, this worker's user: keep {file} on the login "
                  "node's own disk, not on a filesystem the compute nodes share",
                  user=me, file=token_file)]
    if token_file:
        return [_("trials run as {user}, this worker's user: they cannot read its memory, "
                  "but can read {file}; run the worker as root with --trial-user USER to keep "
                  "the file from them", user=me, file=token_file)]
    return []


def _cannot(user: TrialUser) -> list[str]:
    from worker.launcher.process import PACKAGE_ROOT, SHIM, child_env
    out = []
    check = subprocess.run(
        [sys.executable, SHIM, *user.shim_args(), sys.executable, "-c", "import worker.child"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env=child_env(PYTHONPATH=PACKAGE_ROOT))
    if check.returncode != 0:
        why = (check.stderr.strip().splitlines() or ["no output"])[-1]
        out.append(_("{user} cannot run the worker's Python with this package ({why}): "
                     "built-in workloads will fail, recipes whose interpreter {user} may run "
                     "still work; make {python} and {package} readable by {user} to run both",
                     user=user.name, why=why, python=sys.executable, package=PACKAGE_ROOT))
    if not os.path.isdir(user.home):
        out.append(_("the home {home} of {user} does not exist: programs that cache under ~ "
                     "(pip, Hugging Face) will fail; give {user} a home",
                     home=user.home, user=user.name))
    return out
