"""`trialbot-worker`: serve a bot's queue, or run one trial locally.

    trialbot-worker --server URL --token TOKEN [--name NAME] [--recipes FILE]
    trialbot-worker --server URL ... --executor slurm --partition P [--account A] [--shared-dir D]
    trialbot-worker [--recipes FILE] trial llm-infer batch=4 ... [--json]
    trialbot-worker --recipes FILE trial recipe NAME key=value ... [--json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import urllib.parse

from worker import spec as specs
from worker import summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # SIGTERM (systemd, docker stop) unwinds like Ctrl-C, so the running trial's
    # process group is killed on the way out instead of left running.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if "trial" in argv:
            at = argv.index("trial")
            return trial_command(argv[:at], argv[at + 1:])
        return serve_command(argv)
    except KeyboardInterrupt:
        print("trialbot-worker: stopped; the running trial (if any) was killed", file=sys.stderr)
        return 130


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _load_recipes(path: str | None):
    """The recipe file, or exit 2 naming the line that is wrong."""
    if not path:
        return {}
    from worker import recipes
    try:
        return recipes.load(path)
    except recipes.RecipeError as exc:
        print(f"trialbot-worker: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def trial_command(options: list[str], words: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trialbot-worker [--recipes FILE] trial")
    parser.add_argument("--recipes", help="recipe file (TOML) of allowed commands")
    opts = parser.parse_args(options)
    recipes = _load_recipes(opts.recipes)
    as_json = "--json" in words
    words = [w for w in words if w != "--json"]
    if words in ([], ["help"]):
        print(help_text(recipes))
        return 0
    try:
        spec = specs.parse(words, {k: r.workload() for k, r in recipes.items()})
    except specs.SpecError as exc:
        print(f"error: {exc.message}\nusage: trialbot-worker trial "
              f"{exc.usage.removeprefix('/trial ')}", file=sys.stderr)
        return 2
    from worker import attempts
    report = attempts.run(spec, recipes=recipes)
    report["worker"] = socket.gethostname()
    print(json.dumps(report, indent=2) if as_json else summary.text(report))
    return 0 if report["status"] == "ok" else 1


def help_text(recipes: dict | None = None) -> str:
    lines = ["Workloads and parameters (key=value; defaults shown):"]
    workloads = list(specs.WORKLOADS.values()) + [r.workload() for r in (recipes or {}).values()]
    for w in workloads:
        lines.append(f"  {'recipe ' if w.recipe else ''}{w.name}: {w.summary}")
        lines += [f"    {p.describe()}" for p in w.params]
    return "\n".join(lines)


LABEL = re.compile(r"[A-Za-z0-9_.-]{1,40}")  # as bot/routing.py reads them


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trialbot-worker",
                                     description="Run trials for a trialbot server.")
    parser.add_argument("--server", default=os.environ.get("TRIALBOT_SERVER"),
                        help="the bot's URL, e.g. http://bot.example:3000 (env TRIALBOT_SERVER)")
    parser.add_argument("--token", default=os.environ.get("TRIALBOT_WORKER_TOKEN"),
                        help="worker token (env TRIALBOT_WORKER_TOKEN)")
    parser.add_argument("--name", default=socket.gethostname(), help="worker name shown in Slack")
    parser.add_argument("--recipes", help="recipe file (TOML) of commands this worker may run")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="a label trials can ask for with label=KEY=VALUE (repeatable)")
    slurm = parser.add_argument_group("Slurm (run each trial as a batch job; see README, Slurm)")
    slurm.add_argument("--executor", choices=("local", "slurm"), default="local",
                       help="local: a child process here (default); slurm: sbatch from this "
                            "login node")
    slurm.add_argument("--partition", help="Slurm partition (required with --executor slurm)")
    slurm.add_argument("--account", help="Slurm account to charge")
    slurm.add_argument("--shared-dir", help="job directories, on a filesystem the compute "
                       "nodes share (default ~/trialbot-slurm)")
    slurm.add_argument("--mem", default="16G", help="sbatch --mem per trial (default 16G)")
    slurm.add_argument("--gpus", default="auto", help="GPUs per trial: auto (none for "
                       "device=cpu, one per rank for llm-train, else 1) or a number")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="extra sbatch argument, repeatable (e.g. --sbatch-arg=--qos=low)")
    args = parser.parse_args(argv)
    labels = {}
    for raw in args.label:
        key, eq, value = raw.partition("=")
        if not (eq and LABEL.fullmatch(key) and LABEL.fullmatch(value)):
            print(f"trialbot-worker: --label {raw!r} must be KEY=VALUE, e.g. --label team=nlp "
                  "(letters, digits, _.-)", file=sys.stderr)
            return 2
        labels[key] = value
    missing = [f for f, v in (("--server", args.server), ("--token", args.token)) if not v]
    if missing:
        print(f"trialbot-worker: missing {' and '.join(missing)} (or env TRIALBOT_SERVER / "
              "TRIALBOT_WORKER_TOKEN); to run one trial locally: trialbot-worker trial "
              "llm-infer", file=sys.stderr)
        return 2
    url = urllib.parse.urlparse(args.server)
    if url.scheme not in ("http", "https") or not url.hostname:
        print(f"trialbot-worker: --server {args.server!r} is not a URL; write it as "
              "http://HOST:PORT", file=sys.stderr)
        return 2
    if args.executor == "slurm" and not args.partition:
        print("trialbot-worker: --executor slurm needs --partition", file=sys.stderr)
        return 2
    if args.executor == "slurm" and not shutil.which("sbatch"):
        print("trialbot-worker: --executor slurm: sbatch is not on PATH; run the worker on "
              "the cluster's login node", file=sys.stderr)
        return 2
    if args.gpus != "auto" and not args.gpus.isdigit():
        print(f"trialbot-worker: --gpus {args.gpus!r}: write auto or a number", file=sys.stderr)
        return 2
    recipes = _load_recipes(args.recipes)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from worker.agent import Agent
    from worker.client import ApiError, Client
    info, executor = dict(machine_info(), labels=labels), None
    if args.executor == "slurm":
        from worker.slurm import SlurmExecutor, partition_info
        executor = SlurmExecutor(args.partition, args.account, args.shared_dir, args.recipes,
                                 args.mem, args.gpus, args.sbatch_arg)
        # Routing reads what the partition's nodes have, not this login node.
        info.update(partition_info(args.partition), executor="slurm", partition=args.partition)
    agent = Agent(Client(args.server, args.token), args.name, info, recipes, executor)
    from worker import redact
    redact.install(agent.secrets)  # the token and recipes' secrets never reach the log
    try:
        agent.serve_forever()
    except ApiError as exc:
        print(f"trialbot-worker: the server refused us: {exc}"
              + (" — check --token" if exc.status == 401 else ""), file=sys.stderr)
        return 2
    finally:
        agent.stop()
    return 0


def machine_info() -> dict:
    """What the bot shows about this worker: host and GPUs (NVML, no torch import)."""
    from worker import machine
    return {"host": socket.gethostname(), "gpus": [g["name"] for g in machine.gpus()],
            "gpu_memory": [g["memory"] for g in machine.gpus()], "cpus": os.cpu_count(),
            "device": machine.device()}


if __name__ == "__main__":
    sys.exit(main())
