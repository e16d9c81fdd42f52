"""`python worker/shim.py [--cpus 1,2] [--user NAME] ARGV...`: prepare the trial's process,
then exec ARGV.

On Linux it asks the kernel to SIGKILL the trial if the worker dies
(PR_SET_PDEATHSIG), so a stopped or crashed worker never leaves a trial
running on the GPU with no timeout; and it raises the trial's oom_score_adj so
that when host memory runs out the kernel ends the trial, not the worker or bot.

With `--user NAME` (the worker's `--trial-user`) it becomes NAME for good
first, with NAME's own groups and home: the trial cannot read the worker's
memory, environment or token file. The switch happens here, in the worker's
own interpreter, so NAME needs to run only the trial's program.

With `--cpus` it pins itself to those cores before the exec, so every thread
and process the trial starts stays on them (worker/threads.py says why).
"""
import ctypes
import os
import pwd
import signal
import sys

PR_SET_PDEATHSIG = 1


def become(name: str) -> None:
    user = pwd.getpwnam(name)
    os.initgroups(name, user.pw_gid)  # NAME's groups (e.g. video for GPUs), none of the worker's
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)  # as root: real, effective and saved uid, so no way back
    os.environ.update(HOME=user.pw_dir, USER=name, LOGNAME=name)


def prepare(user: str | None = None) -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass
    if user:  # after oom_score_adj: the switch makes /proc/self root's until exec
        try:
            become(user)
        except (KeyError, OSError) as exc:
            sys.stderr.write(f"trialbot: cannot run the trial as user {user}: "
                             f"{'no such user' if isinstance(exc, KeyError) else exc}\n")
            os._exit(126)
    try:  # after the switch: a change of user clears the parent-death signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker's own cleanup still applies
        pass
    if os.getppid() == 1:  # the worker died before prctl took effect
        os._exit(137)


if __name__ == "__main__":
    args = sys.argv[1:]
    name = None
    if args[:1] == ["--cpus"]:
        try:
            os.sched_setaffinity(0, {int(c) for c in args[1].split(",")})
        except OSError as exc:  # a cpuset changed since: run unpinned, and say so
            sys.stderr.write(f"trialbot: could not pin the trial to cores {args[1]}: {exc}\n")
        args = args[2:]
    if args[:1] == ["--user"]:
        name, args = args[1], args[2:]
    prepare(name)
    try:
        os.execvp(args[0], args)
    except OSError as exc:
        sys.stderr.write(f"trialbot: cannot run {args[0]}"
                         f"{f' as user {name}' if name else ''}: {exc.strerror}\n")
        os._exit(127)
