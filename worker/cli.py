"""`trialbot-worker`: serve a bot's queue, or run one trial locally.

    trialbot-worker --server URL --token TOKEN [--name NAME]
    trialbot-worker trial llm-infer batch=4 ... [--json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys

from worker import spec as specs
from worker import summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["trial"]:
        return trial_command(argv[1:])
    return serve_command(argv)


def trial_command(words: list[str]) -> int:
    as_json = "--json" in words
    words = [w for w in words if w != "--json"]
    if words in ([], ["help"]):
        print(help_text())
        return 0
    try:
        spec = specs.parse(words)
    except specs.SpecError as exc:
        print(f"error: {exc.message}\nusage: trialbot-worker trial {exc.usage.removeprefix('/trial ')}",
              file=sys.stderr)
        return 2
    from worker import launcher
    report = launcher.run_trial(spec)
    report["worker"] = socket.gethostname()
    print(json.dumps(report, indent=2) if as_json else summary.text(report))
    return 0 if report["status"] == "ok" else 1


def help_text() -> str:
    lines = ["Workloads and parameters (key=value; defaults shown):"]
    for w in specs.WORKLOADS.values():
        lines.append(f"  {w.name}: {w.summary}")
        lines += [f"    {p.describe()}" for p in w.params]
    return "\n".join(lines)


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trialbot-worker",
                                     description="Run trials for a trialbot server.")
    parser.add_argument("--server", default=os.environ.get("TRIALBOT_SERVER"),
                        help="the bot's URL, e.g. http://bot.example:3000 (env TRIALBOT_SERVER)")
    parser.add_argument("--token", default=os.environ.get("TRIALBOT_WORKER_TOKEN"),
                        help="worker token (env TRIALBOT_WORKER_TOKEN)")
    parser.add_argument("--name", default=socket.gethostname(), help="worker name shown in Slack")
    args = parser.parse_args(argv)
    missing = [f for f, v in (("--server", args.server), ("--token", args.token)) if not v]
    if missing:
        print(f"trialbot-worker: missing {' and '.join(missing)} (or env TRIALBOT_SERVER / "
              "TRIALBOT_WORKER_TOKEN); to run one trial locally: trialbot-worker trial "
              "llm-infer", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from worker.agent import Agent
    from worker.client import ApiError, Client
    agent = Agent(Client(args.server, args.token), args.name)
    try:
        agent.serve_forever()
    except ApiError as exc:
        print(f"trialbot-worker: the server refused us: {exc}"
              + (" — check --token" if exc.status == 401 else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
