"""`python worker/shim.py ARGV...`: prepare the trial's process, then exec ARGV.

On Linux it asks the kernel to SIGKILL the trial if the worker dies
(PR_SET_PDEATHSIG), so a stopped or crashed worker never leaves a trial
running on the GPU with no timeout; and it raises the trial's oom_score_adj so
that when host memory runs out the kernel ends the trial, not the worker or bot.
"""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def prepare() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker's own cleanup still applies
        pass
    if os.getppid() == 1:  # the worker died before prctl took effect
        os._exit(137)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass


if __name__ == "__main__":
    prepare()
    os.execvp(sys.argv[1], sys.argv[1:])
