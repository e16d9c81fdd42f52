"""The checks `trialbot-worker doctor` runs, one function per subject, each
returning lines. torch is asked in a child process (a box without it gets a
line, not a traceback); nothing here registers, leases or runs a trial."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from worker.i18n import N_, _

# Exit codes: one bit per class of failure, so a run with several says each.
OK = 0
GPU = 1          # torch cannot use a GPU, or NVML sees none (a CPU-only box too)
UNREACHABLE = 2  # no bot answers at --server
TOKEN = 4        # the bot refused the token, or none was given
RECIPES = 8      # the recipe file is refused, or a recipe's program is missing
DISK = 16        # the work directory is missing or low on space
CLOCK = 32       # this clock is off the bot's by more than CLOCK_LIMIT
USAGE = 64       # the doctor's own options are wrong

# Leases are timed on the bot's clock alone (a lease expires 60 s after the last
# heartbeat the bot received; heartbeats go every 10 s by the worker's own
# timer), so an offset never expires one. What the worker's clock dates is its
# idle seconds (by UTC day) and a report's started/finished stamps, which the
# bot's cards and charts set beside its own. One heartbeat interval of drift
# already puts those out of step, and NTP keeps a synced clock within 0.1 s.
CLOCK_LIMIT = 10.0
DISK_MIN = 5 * 2**30  # recipe setup steps (pip install of a CUDA wheel: a few GiB)

STATUS = {"ok": N_("ok"), "fail": N_("FAIL"), "warn": N_("warn"), "skip": N_("skip")}


@dataclass
class Line:
    status: str  # ok, fail, warn, skip
    what: str  # the subject: torch, gpu, bot, token, clock, recipes, disk
    text: str  # a whole sentence; a failing one says how to fix it
    code: int = OK  # the class bit, when it failed


TORCH_PROBE = ("import json, torch; ok = torch.cuda.is_available(); "
               "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
               "'available': ok, 'count': torch.cuda.device_count() if ok else 0}))")


def torch_lines() -> list[Line]:
    try:
        done = subprocess.run([sys.executable, "-c", TORCH_PROBE], capture_output=True,
                              text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return [Line("fail", "torch", _(
            "`import torch` took over {seconds} s and was stopped. Fix: check that {python} "
            "starts on its own (a hung driver or a slow network filesystem?).",
            seconds=180, python=sys.executable), GPU)]
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if "No module named 'torch'" in done.stderr:
            return [Line("fail", "torch", _(
                "torch is not installed for {python}. Fix: `pip install torch` (a box with "
                "a CUDA build of torch keeps it: see the README).", python=sys.executable), GPU)]
        return [Line("fail", "torch", _(
            "`import torch` fails: {error}. Fix: reinstall torch for {python}.",
            error=last, python=sys.executable), GPU)]
    t = json.loads(done.stdout.strip().splitlines()[-1])
    if not t["cuda"]:
        return [Line("fail", "torch", _(
            "torch {version} is a CPU-only build, so trials here run on CPU. Fix: on a GPU "
            "box install a CUDA build, e.g. `pip install torch --index-url "
            "https://download.pytorch.org/whl/cu128`.", version=t["version"]), GPU)]
    if not t["available"]:
        return [Line("fail", "torch", _(
            "torch {version} is built for CUDA {cuda}, but CUDA is not available. Fix: "
            "check that `nvidia-smi` lists the GPUs and that the driver supports CUDA "
            "{cuda} (see the gpu line).", version=t["version"], cuda=t["cuda"]), GPU)]
    return [Line("ok", "torch", _(
        "torch {version}, built for CUDA {cuda}; CUDA devices it can use: {n}.",
        version=t["version"], cuda=t["cuda"], n=t["count"]))]


def gpu_lines() -> list[Line]:
    if importlib.util.find_spec("pynvml") is None:
        return [Line("fail", "gpu", _(
            "nvidia-ml-py is not installed, so NVML cannot list the GPUs. Fix: "
            "`pip install nvidia-ml-py`."), GPU)]
    from worker import machine
    from worker.probes.nvml import _init, _text
    nvml, why = _init()
    if not nvml:
        return [Line("fail", "gpu", _(
            "No GPU: {why}. Fix: on a GPU box install the NVIDIA driver until `nvidia-smi` "
            "lists the GPUs (in a container: `docker run --gpus all`); on a CPU-only box "
            "trials run on CPU and this line stays failed.", why=why), GPU)]
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(nvml)
        found = machine.gpus()  # what the worker registers
    except nvml.NVMLError as exc:
        return [Line("fail", "gpu", _(
            "NVML fails while listing the GPUs: {error}. Fix: check `nvidia-smi`; a driver "
            "newer than its kernel module needs a reboot.", error=str(exc)), GPU)]
    finally:
        nvml.nvmlShutdown()
    return [Line("ok", "gpu", _(
        "GPU {index}: {name}, {gib} GiB, driver {driver}, CUDA {cuda}.", index=g["index"],
        name=g["name"], driver=driver, cuda=cuda, gib=format(g["memory"] / 2**30, ".1f")))
        for g in found] or [Line("fail", "gpu", _(
            "NVML works (driver {driver}) but sees no GPU. Fix: check `nvidia-smi` and "
            "CUDA_VISIBLE_DEVICES.", driver=driver), GPU)]


def _cuda_version(nvml) -> str:
    """The CUDA version the driver supports, e.g. 12040 read as 12.4."""
    try:
        v = nvml.nvmlSystemGetCudaDriverVersion()
    except nvml.NVMLError:  # an old driver may not say
        return "?"
    return f"{v // 1000}.{v % 1000 // 10}"


def bot_lines(server: str | None, token: str | None, name: str,
              ca_file: str | None = None) -> list[Line]:
    """The bot, the token and the clock: POST /api/ping, best of three round trips;
    an https:// bot verified as the worker does (`ca_file`, else the system store)."""
    from worker.client import ApiError, CertError, Client, ca_problem, server_problem
    if not server:
        return [Line("fail", "bot", _(
            "No bot URL given. Fix: pass `--server URL` or set TRIALBOT_SERVER."), UNREACHABLE),
            *_no_token(token), _skip_clock()]
    https = server.startswith("https://")  # only then is --ca-file read, as by the worker
    problem = server_problem(server) or (ca_problem(ca_file) if ca_file and https else None)
    if problem:
        return [Line("fail", "bot", problem, UNREACHABLE), _skip("token"), _skip_clock()]
    client = Client(server, token or "", ca_file)
    try:
        rtt, local, reply = _best_ping(client, name)
    except ApiError as exc:
        return _refused(exc, server, token, name)
    except CertError as exc:
        return [Line("fail", "bot", _(
            "The bot at {url} answers, but its TLS certificate is not trusted here: {error}. "
            "Fix: give its proxy a certificate from a public CA, or pass `--ca-file` with "
            "your own CA's certificate.", url=server, error=str(exc)), UNREACHABLE),
            _skip("token"), _skip_clock()]
    except (OSError, ValueError) as exc:  # refused, DNS, TLS handshake, timeout; or not JSON
        return [Line("fail", "bot", _(
            "The bot at {url} does not answer: {error}. Fix: start it (`trialbot serve`) or "
            "correct the URL; from a rented box reach it through `ssh -N -L "
            "3000:localhost:3000 bot-host` and `--server http://localhost:3000`.",
            url=server, error=_reason(exc)), UNREACHABLE), _skip("token"), _skip_clock()]
    if not (isinstance(reply, dict) and isinstance(reply.get("time"), (int, float))):
        return [Line("fail", "bot", _(
            "Something answers at {url}, but not as a trialbot bot. Fix: check the URL and "
            "port (the bot's TRIALBOT_PORT, 3000 by default).", url=server), UNREACHABLE),
            _skip("token"), _skip_clock()]
    return [Line("ok", "bot", _("The bot at {url} answers ({ms} ms round trip).", url=server,
                                ms=format(rtt * 1000, ".0f"))),
            *_token_lines(token, reply, name), _clock_line(reply, local, rtt)]


def _best_ping(client, name: str) -> tuple[float, float, Any]:
    """(round trip, this clock at the answer's middle, reply) of the fastest of three pings."""
    pings = []
    for _try in range(3):
        t0, p0 = time.time(), time.perf_counter()
        reply = client.call("/api/ping", {"worker": name}, timeout=10)
        rtt = time.perf_counter() - p0
        pings.append((rtt, t0 + rtt / 2, reply))
    return min(pings, key=lambda ping: ping[0])  # the first of equals, as before


def _token_lines(token: str | None, reply: dict, name: str) -> list[Line]:
    if not token:  # only a bot with an empty shared token accepts none
        return _no_token(token)
    if reply.get("token") == "shared":
        return [Line("ok", "token", _(
            "The token is accepted: the shared token, which may act as any worker."))]
    return [Line("ok", "token", _(
        "The token is accepted: it is worker `{name}`'s own token.", name=name))]


def _clock_line(reply: dict, local: float, rtt: float) -> Line:
    offset = reply["time"] - local
    values = dict(offset=format(offset, "+.3f"), error=format(rtt / 2, ".3f"),
                  limit=format(CLOCK_LIMIT, "g"), lease=format(reply["lease"], "g"),
                  heartbeat=format(reply["heartbeat"], "g"))
    if abs(offset) > CLOCK_LIMIT:
        return Line("fail", "clock", _(
            "The bot's clock is {offset} s from this one (±{error} s), over the {limit} s "
            "limit: idle time and reports' times are dated wrongly. Fix: turn on time sync "
            "here and on the bot's host (`timedatectl set-ntp true`, or chrony).", **values),
            CLOCK)
    return Line("ok", "clock", _(
        "The bot's clock is {offset} s from this one (±{error} s; limit {limit} s). "
        "Leases last {lease} s after a heartbeat, sent every {heartbeat} s.", **values))


def _refused(exc, server: str, token: str | None, name: str) -> list[Line]:
    if exc.status in (401, 403):
        answers = Line("ok", "bot", _("The bot at {url} answers.", url=server))
        if not token:
            return [answers, *_no_token(token), _skip_clock()]
        if exc.status == 401:
            fix = Line("fail", "token", _(
                "The bot refused the token: {error}. Fix: use the bot's TRIALBOT_WORKER_TOKEN, "
                "or make this worker its own with `trialbot worker-token create {name}` on "
                "the bot's host.", error=str(exc), name=name), TOKEN)
        else:
            fix = Line("fail", "token", _(
                "The token is another worker's: {error}. Fix: run with that worker's "
                "`--name`, or make one for this name with `trialbot worker-token create "
                "{name}`.", error=str(exc), name=name), TOKEN)
        return [answers, fix, _skip_clock()]
    if exc.status == 404:
        line = Line("fail", "bot", _(
            "The bot at {url} answers but has no /api/ping: it is older than this worker. "
            "Fix: update trialbot on the bot's host.", url=server), UNREACHABLE)
    else:
        line = Line("fail", "bot", _(
            "The bot at {url} answered {error}. Fix: see the bot's log.", url=server,
            error=str(exc)), UNREACHABLE)
    return [line, _skip("token"), _skip_clock()]


def _no_token(token: str | None) -> list[Line]:
    if token:
        return [_skip("token")]
    return [Line("fail", "token", _(
        "No worker token given. Fix: pass `--token-file FILE` or set TRIALBOT_WORKER_TOKEN."),
        TOKEN)]


def _skip(what: str) -> Line:
    return Line("skip", what, _("Not checked: the bot did not answer."))


def _skip_clock() -> Line:
    return Line("skip", "clock", _("Not checked: the clock is read from the bot's answer to "
                                   "an accepted token."))


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", None) or exc)


def recipe_lines(path: str | None, gpu_ok: bool) -> list[Line]:
    from worker import recipes
    if not path:
        return [Line("ok", "recipes", _(
            "No recipe file (`--recipes`): this worker runs the built-in workloads only."))]
    try:
        found = recipes.load(path)
    except recipes.RecipeError as exc:
        return [Line("fail", "recipes", _(
            "The worker refuses this recipe file: {error}. Fix: correct the line it names "
            "(docs/recipes.md).", error=str(exc)), RECIPES)]
    lines = [Line("ok", "recipes", _("{path} is accepted; its recipes: {n}.", path=path,
                                     n=len(found)))]
    for r in found.values():
        lines.append(_recipe_line(r, gpu_ok))
    return lines


def _recipe_line(r, gpu_ok: bool) -> Line:
    values = dict(name=r.name, program=r.argv[0], cwd=r.cwd)
    if not _runnable(r.argv[0], r.cwd):
        if r.setup:  # its setup may make it, e.g. a venv's python
            return Line("warn", "recipes", _(
                "Recipe `{name}`: its program `{program}` is not here yet (not on PATH nor in "
                "{cwd}); fine if its setup makes it, else install it.", **values))
        return Line("fail", "recipes", _(
            "Recipe `{name}`: its program `{program}` is not on PATH nor in {cwd}. Fix: "
            "install it, or write its full path in `argv`.", **values), RECIPES)
    if r.setup and not _runnable(r.setup[0][0], r.cwd):
        return Line("fail", "recipes", _(
            "Recipe `{name}`: its first setup command `{program}` is not on PATH nor in {cwd}. "
            "Fix: install it, or write its full path in `setup`.",
            name=r.name, program=r.setup[0][0], cwd=r.cwd), RECIPES)
    if r.requires == "cuda" and not gpu_ok:
        return Line("warn", "recipes", _(
            "Recipe `{name}` requires CUDA and this box has none usable, so the bot sends "
            "it no such trial.", name=r.name))
    return Line("ok", "recipes", _(
        "Recipe `{name}`: `{program}` found, cwd {cwd}, requires {requires}, timeout "
        "{timeout} s, params: {n}.", **values, requires=r.requires, timeout=r.timeout,
        n=len(r.params)))


def _runnable(program: str, cwd: str) -> bool:
    if program == "{python}":
        return True
    if "{" in program:  # chosen by a parameter: known only per trial
        return True
    if os.sep in program:
        return os.access(os.path.join(cwd, program), os.X_OK)
    return shutil.which(program) is not None


def disk_lines(workdir: str) -> list[Line]:
    try:
        usage = shutil.disk_usage(workdir)
    except OSError as exc:
        return [Line("fail", "disk", _(
            "The work directory {dir} cannot be read: {error}. Fix: create it, or pass "
            "`--workdir DIR` (trials' scratch goes to TMPDIR).", dir=workdir,
            error=exc.strerror or str(exc)), DISK)]
    values = dict(dir=workdir, free=format(usage.free / 2**30, ".1f"),
                  total=format(usage.total / 2**30, ".1f"), least=format(DISK_MIN / 2**30, "g"))
    if usage.free < DISK_MIN:
        return [Line("fail", "disk", _(
            "Only {free} GiB free of {total} GiB in {dir}, under {least} GiB. Fix: free space, "
            "or point TMPDIR (and `--workdir`) at a larger disk.", **values), DISK)]
    return [Line("ok", "disk", _("{free} GiB free of {total} GiB in {dir}.", **values))]
