#!/usr/bin/env python3
"""Time from a fresh venv to a registered worker on this machine, by phase.

    python scripts/bench_fresh_worker.py [--runs N] [--torch SPEC] [--keep DIR]

Each run: a new venv; `pip install torch==2.13.0` (the local CPU build; pip's
own config decides where it comes from); the worker installed as
docker/worker.Dockerfile installs it (pyproject.toml, README.md and worker/
only, torch pinned by a constraint file made from the installed torch); a
`trialbot serve` in HTTP mode from the venv running this script (the bot is
not part of the box's install); `trialbot-worker` from the new venv; then
GET /api/workers with the token, polled every 0.1 s, until the worker is
listed online. The bot's Slack URL points at a closed port: nothing leaves.
Checks on the way: torch is the same build before and after the worker's
install, and the worker's venv cannot import slack_bolt.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv running this script has the bot
TOKEN = "bench-token"
KEEP = "import torch; print('torch==' + torch.__version__)"  # as the Dockerfile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, **kw) -> str:
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    return done.stdout


def wait(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what}: not within {timeout:.0f} s")


def registered(url: str, name: str) -> bool:
    req = urllib.request.Request(url + "/api/workers",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=2) as resp:
        listed = json.loads(resp.read())["workers"]
    return any(w["name"] == name and w["online"] for w in listed)


def one_run(work: Path, torch_spec: str) -> dict[str, float]:
    phases: dict[str, float] = {}

    def timed(name: str, fn):
        start = time.perf_counter()
        out = fn()
        phases[name] = time.perf_counter() - start
        return out

    venv = work / "venv"
    before = install(work, venv, torch_spec, timed)
    start_both(work, venv, timed)
    phases["total"] = sum(phases.values())
    phases["torch kept"] = before.removeprefix("torch==")
    return phases


def install(work: Path, venv: Path, torch_spec: str, timed) -> str:
    """A venv with torch, then the worker installed beside it; the torch it kept."""
    py, pip = venv / "bin" / "python", venv / "bin" / "pip"
    timed("venv", lambda: run(sys.executable, "-m", "venv", venv))
    timed("torch", lambda: run(pip, "install", "-q", torch_spec))
    before = run(py, "-c", KEEP).strip()
    src = work / "src"  # what the worker image copies
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "worker", src / "worker",
                    ignore=shutil.ignore_patterns("__pycache__"))
    keep = work / "keep-torch.txt"
    keep.write_text(before + "\n")
    timed("worker install", lambda: run(pip, "install", "-q", "-c", keep, src))
    after = run(py, "-c", KEEP).strip()
    if after != before:
        raise SystemExit(f"the worker's install replaced {before} with {after}")
    if subprocess.run([py, "-c", "import slack_bolt"], capture_output=True).returncode == 0:
        raise SystemExit("the worker's venv can import slack_bolt: the worker pulled Slack code")
    return before


def start_both(work: Path, venv: Path, timed) -> None:
    """The bot, then the installed worker, timed until the bot lists it online."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET="bench",
               TRIALBOT_WORKER_TOKEN=TOKEN, TRIALBOT_DB=str(work / "bot.db"),
               TRIALBOT_PORT=str(port), TRIALBOT_HOST="127.0.0.1",
               SLACK_API_URL="http://127.0.0.1:9/api/")
    env.pop("SLACK_APP_TOKEN", None)
    logs = [open(work / "bot.log", "wb"), open(work / "worker.log", "wb")]
    procs = []
    try:
        procs.append(subprocess.Popen([BIN / "trialbot", "serve"], env=env, stdout=logs[0],
                                      stderr=subprocess.STDOUT, cwd=work))
        timed("bot up", lambda: wait("the bot's /healthz",
                                     lambda: urllib.request.urlopen(url + "/healthz",
                                                                    timeout=2).status == 200))
        worker_env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        worker_env.update(TRIALBOT_WORKER_TOKEN=TOKEN, PATH=f"{venv / 'bin'}:/usr/bin:/bin")
        procs.append(subprocess.Popen([venv / "bin" / "trialbot-worker", "--server", url,
                                       "--name", "bench-w"], env=worker_env, stdout=logs[1],
                                      stderr=subprocess.STDOUT, cwd=work))
        timed("worker registered", lambda: wait("the worker in GET /api/workers",
                                                lambda: registered(url, "bench-w")))
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--torch", default="torch==2.13.0", help="what the box has installed")
    parser.add_argument("--keep", help="keep each run's directory under DIR")
    args = parser.parse_args()
    for n in range(1, args.runs + 1):
        work = Path(tempfile.mkdtemp(prefix="fresh-worker-", dir=args.keep))
        try:
            phases = one_run(work, args.torch)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        print(f"run {n}: " + ", ".join(f"{k} {v:.1f} s" if isinstance(v, float) else
                                       f"{k} {v}" for k, v in phases.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
