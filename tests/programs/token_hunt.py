"""A hostile recipe: hunt for the worker's token in every ancestor process.

For each ancestor up to pid 1 it tries /proc/PID/environ, cmdline, the
readable regions of mem (listed in maps), and any file named on the command
line, and writes what it could and could not read to $HUNT_OUT as JSON. It
knows the token only reversed ($HUNT_REVERSED), so the token is never whole
in its own argv or environment; it never prints the token, only FOUND.
Stdlib only: it may run under another interpreter than the worker's.
"""
import json
import os

WANT = os.environ["HUNT_REVERSED"][::-1].encode()
CHUNK = 1 << 20
FILE_LIMIT = 1 << 20


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "FOUND" if WANT in f.read() else "read, not found"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def memory(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    seen = 0
    with mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            pos, end = (int(x, 16) for x in span.split("-"))
            tail = b""
            while pos < end:
                try:
                    mem.seek(pos)
                    chunk = mem.read(min(CHUNK, end - pos))
                except (OSError, OverflowError, ValueError):
                    break  # [vvar] and the like
                if not chunk:
                    break
                if WANT in tail + chunk:
                    return "FOUND"
                tail, pos, seen = chunk[-len(WANT):], pos + len(chunk), seen + len(chunk)
    return f"read {seen} bytes, not found"


def files(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return {}
    named = {a for a in args if a.startswith("/") and os.path.isfile(a)
             and os.path.getsize(a) < FILE_LIMIT}
    return {path: read(path) for path in sorted(named)}


def writable(directory: str) -> bool:
    try:
        with open(os.path.join(directory, "hunt.txt"), "w") as f:
            f.write("the trial may write where the worker said")
        return True
    except OSError:
        return False


def hunt() -> dict:
    found = {"self_mem": memory(os.getpid()), "uid": os.getuid(), "ancestors": [],
             "probe_dir_writable": writable(os.environ["TRIALBOT_PROBE_OUT"])}
    pid = os.getppid()
    while pid > 0:
        found["ancestors"].append({"pid": pid, "environ": read(f"/proc/{pid}/environ"),
                                   "cmdline": read(f"/proc/{pid}/cmdline"),
                                   "mem": memory(pid), "files": files(pid)})
        pid = parent_of(pid)
    return found


if __name__ == "__main__":
    found = hunt()
    with open(os.environ["HUNT_OUT"], "w") as f:
        json.dump(found, f, indent=1)
    for a in found["ancestors"]:
        print(f"pid {a['pid']}: environ {a['environ']}; cmdline {a['cmdline']}; "
              f"mem {a['mem']}")
