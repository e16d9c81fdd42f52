"""`trialbot-worker`: serve a bot's queue, or run one trial locally.

    trialbot-worker --server URL --token-file FILE [--name NAME] [--recipes FILE]
        [--trial-user USER] [--ca-file CA.pem]   (or the token in env TRIALBOT_WORKER_TOKEN)
        [--stop-grace SECONDS]
    trialbot-worker --server URL ... --executor slurm --partition P [--account A] [--shared-dir D]
    trialbot-worker [--recipes FILE] trial llm-infer batch=4 ... [--json]
    trialbot-worker --recipes FILE trial recipe NAME key=value ... [--json]
    trialbot-worker trial hf-infer model=PATH/config.json layers=2 ...   (needs trialbot[hf])
    trialbot-worker doctor [--server URL ...] [--recipes FILE] [--workdir DIR]   (docs/doctor.md)
    trialbot-worker check PATH [--json] [--python 3.12] [--platform linux] [--offline] [--resolve]
        (a repository read without running it, its pins resolved for a target: docs/compat.md)
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable

from worker import i18n, summary
from worker import spec as specs
from worker.i18n import _
from worker.report import Report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # SIGTERM (systemd, docker stop) unwinds like Ctrl-C, so the running trial's
    # process group is killed on the way out instead of left running. A worker
    # serving a bot replaces this once it runs (_stop_on_signals).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        i18n.set_default(os.environ.get("TRIALBOT_LANG") or i18n.DEFAULT)
    except i18n.LanguageError as exc:
        _say(f"TRIALBOT_LANG: {exc.message}")
        return 2
    i18n.argparse_follows()
    try:
        if argv[:1] == ["doctor"]:  # checks this box; runs no trial
            from worker import doctor
            return doctor.main(argv[1:])
        if argv[:1] == ["check"]:  # reads a repository; runs nothing
            return check_command(argv[1:])
        if "trial" in argv:
            at = argv.index("trial")
            return trial_command(argv[:at], argv[at + 1:])
        return serve_command(argv)
    except KeyboardInterrupt:
        _say(_("stopped; the running trial (if any) was killed"))
        return 130


def _say(message: str) -> None:
    """One line to the person at the console, on stderr, in their language."""
    print(f"trialbot-worker: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    _say(_("warning: {message}", message=message))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _load_recipes(path: str | None):
    """The recipe file, or exit 2 naming the line that is wrong."""
    from worker import offer
    try:
        return offer.recipes(path)
    except offer.StartError as exc:
        _say(_("refusing to start: {why}", why=exc))
        raise SystemExit(2) from None


def trial_command(options: list[str], words: list[str]) -> int:
    from worker import offer
    parser = argparse.ArgumentParser(prog="trialbot-worker [--recipes FILE] trial")
    offer.add_options(parser, _("recipe file (TOML) of allowed commands"))
    opts = parser.parse_args(options)
    recipes = _load_recipes(opts.recipes)
    as_json = "--json" in words
    words = [_local_model(w, opts.models) for w in words if w != "--json"]
    offer.allow_models(opts.models, opts.hub)
    if words in ([], ["help"]):
        print(help_text(recipes))
        return 0
    try:
        spec = specs.parse(words, {k: r.workload() for k, r in recipes.items()})
    except specs.SpecError as exc:
        # the usage's first form: the rest (`/trial status T12` ...) are the bot's
        usage = exc.usage.removeprefix("/trial ").split("  |  ")[0]
        print(_("error: {message}", message=exc.message), file=sys.stderr)
        print(_("usage: {usage}", usage=f"trialbot-worker trial {usage}"), file=sys.stderr)
        return 2
    from worker import attempts
    report = attempts.run(spec, recipes=recipes)
    report["worker"] = socket.gethostname()
    print(json.dumps(report, indent=2) if as_json else summary.text(report))
    return 0 if report["status"] == "ok" else 1


def check_command(words: list[str]) -> int:
    """`check PATH ...`: worker/compat/command.py, with this worker's uv."""
    from worker import environment
    from worker.compat import command
    return command.main(words, environment.uv_binary)


def help_text(recipes: dict | None = None) -> str:
    lines = [_("Workloads and parameters (key=value; defaults shown):")]
    workloads = list(specs.WORKLOADS.values()) + [r.workload() for r in (recipes or {}).values()]
    for w in workloads:
        lines.append(f"  {'recipe ' if w.recipe else ''}{w.name}: {w.summary_text()}")
        lines += [f"    {p.describe()}" for p in w.params]
    return "\n".join(lines)


LABEL = re.compile(r"[A-Za-z0-9_.-]{1,40}")  # as bot/trials/routing.py reads them


def _local_model(word: str, dirs: list[str]) -> str:
    """`model=PATH` run locally: any readable config, its directory allowed."""
    key, _, value = word.partition("=")
    if key != "model" or not os.path.exists(value):
        return word
    path = os.path.abspath(value)
    dirs.append(os.path.dirname(path))
    return f"model={os.path.basename(path)}"


def serve_command(argv: list[str]) -> int:
    from worker import offer, secrecy
    hidden = secrecy.undumpable()  # first: from here on a trial cannot read our memory
    args = _serve_parser().parse_args(argv)
    token = _token(args)
    if token and argv == sys.argv[1:] and secrecy.needs_hand_over(argv):
        secrecy.hand_over(token, argv)  # does not return: this pid, a clean image
    labels = _labels(args.label)
    if labels is None or not _options_ok(args, token):
        return 2
    assert token  # _options_ok refused a missing token
    grace = _seconds(args.stop_grace)
    recipes = _recipes_ok(args)
    if recipes is None:
        return 2
    offer.allow_models(args.models, args.hub)
    user = _trial_user(args, hidden)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # From here a stop is read, not raised: before the agent exists (NVML, imports)
    # it ends the worker, which holds nothing yet; after, it hands the trial back.
    from worker.signals import Signals
    started: list = []  # the agent, once it exists
    threading.Thread(target=_stop_on_signals, args=(Signals(), started, grace), daemon=True,
                     name="signals").start()
    from worker.agent import Agent
    from worker.client import Client
    info = dict(machine_info(), labels=labels)
    info["hf"] = offer.hf()
    executor = _executor(args, user, info)
    agent = Agent(Client(args.server, token, args.ca_file), args.name, info, recipes, executor)
    from worker import redact
    redact.install(agent.secrets)  # the token and recipes' secrets never reach the log
    started.append(agent)
    return _serve(agent)


def _serve_parser() -> argparse.ArgumentParser:
    from worker import offer
    from worker.signals import GRACE
    parser = argparse.ArgumentParser(prog="trialbot-worker",
                                     description=_("Run trials for a trialbot server."))
    parser.add_argument("--server", default=os.environ.get("TRIALBOT_SERVER"),
                        help=_("the bot's URL, e.g. http://bot.example:3000 "
                               "(env TRIALBOT_SERVER)"))
    parser.add_argument("--token-file", metavar="FILE",
                        help=_("read the worker token from FILE (mode 600; e.g. systemd "
                             "LoadCredential=); or set env TRIALBOT_WORKER_TOKEN"))
    parser.add_argument("--token", help=_("the worker token itself: every user's `ps` shows it, "
                                        "prefer --token-file or the environment"))
    parser.add_argument("--ca-file", metavar="FILE", default=os.environ.get("TRIALBOT_CA_FILE"),
                        help=_("for an https:// server: the CA bundle (PEM) that signed the "
                             "bot's certificate, if not a public CA (env TRIALBOT_CA_FILE); "
                             "certificates are always verified"))
    parser.add_argument("--trial-user", metavar="USER",
                        help=_("run trials as USER (the worker runs as root), so they cannot "
                             "read the worker's token, memory or files"))
    parser.add_argument("--name", default=socket.gethostname(),
                        help=_("worker name shown in Slack"))
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help=_("a label trials can ask for with label=KEY=VALUE (repeatable)"))
    parser.add_argument("--stop-grace", metavar="SECONDS",
                        default=os.environ.get("TRIALBOT_STOP_GRACE", str(GRACE)),
                        help=_("on SIGTERM or Ctrl-C, how long the running trial may still "
                               "end and report (default {grace}, env TRIALBOT_STOP_GRACE); "
                               "then it is killed and handed back to the queue. docker stop "
                               "kills at 10 s: raise both together", grace=f"{GRACE:g}"))
    offer.add_options(parser, _("recipe file (TOML) of commands this worker may run"))
    _slurm_options(parser)
    return parser


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    slurm = parser.add_argument_group(
        _("Slurm (run each trial as a batch job; see docs/slurm.md)"))
    slurm.add_argument("--executor", choices=("local", "slurm"), default="local",
                       help=_("local: a child process here (default); slurm: sbatch from this "
                            "login node"))
    slurm.add_argument("--partition", help=_("Slurm partition (required with --executor slurm)"))
    slurm.add_argument("--account", help=_("Slurm account to charge"))
    slurm.add_argument("--shared-dir", help=_("job directories, on a filesystem the compute "
                       "nodes share (default ~/trialbot-slurm)"))
    slurm.add_argument("--mem", default="16G", help=_("sbatch --mem per trial (default 16G)"))
    slurm.add_argument("--gpus", default="auto", help=_("GPUs per trial: auto (none for "
                       "device=cpu, one per rank for llm-train, else 1) or a number"))
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help=_("extra sbatch argument, repeatable (e.g. --sbatch-arg=--qos=low)"))


def _labels(raws: list[str]) -> dict | None:
    """--label KEY=VALUE as a dict, or None after saying which one is wrong."""
    labels = {}
    for raw in raws:
        key, eq, value = raw.partition("=")
        if not (eq and LABEL.fullmatch(key) and LABEL.fullmatch(value)):
            _say(_("--label {label} must be KEY=VALUE (letters, digits, _.-), e.g. "
                   "`--label team=nlp`", label=repr(raw)))
            return None
        labels[key] = value
    return labels


def _options_ok(args, token: str | None) -> bool:
    """The options fit together; else False, the first problem said."""
    missing = [f for f, v in (("--server", args.server), ("--token-file", token)) if not v]
    if missing:
        _say(_("missing {options} (or env TRIALBOT_SERVER / TRIALBOT_WORKER_TOKEN); to run "
               "one trial locally: `trialbot-worker trial llm-infer`",
               options=", ".join(missing)))
        return False
    if not _server_ok(args.server, args.ca_file):
        return False
    if not _slurm_ok(args):
        return False
    if _seconds(args.stop_grace) is None:
        _say(_("--stop-grace {value} (or TRIALBOT_STOP_GRACE) must be seconds from 0 to "
               "{most}, e.g. `--stop-grace 6`", value=repr(args.stop_grace), most=MAX_GRACE))
        return False
    if args.gpus != "auto" and not args.gpus.isdigit():
        _say(_("--gpus {value}: write `auto` or a number of GPUs, e.g. `--gpus 2`",
               value=repr(args.gpus)))
        return False
    return True


def _slurm_ok(args) -> bool:
    """--executor slurm has what it needs; else False, said."""
    if args.executor == "slurm" and not args.partition:
        _say(_("--executor slurm needs --partition, e.g. `--partition gpu`"))
        return False
    if args.trial_user and args.executor == "slurm":
        _say(_("--trial-user applies to trials run here; with --executor slurm they run on "
               "compute nodes as the user who submits them (this worker's): leave out "
               "--trial-user"))
        return False
    if args.executor == "slurm" and not shutil.which("sbatch"):
        _say(_("--executor slurm: sbatch is not on PATH; run the worker on the cluster's "
               "login node"))
        return False
    return True


def _recipes_ok(args) -> dict | None:
    """The recipes and model directories this worker may serve; None after a refusal."""
    from worker import offer
    recipes = _load_recipes(args.recipes)
    own = sorted(n for n, r in recipes.items() if r.environment.repo or r.environment.declared)
    if args.trial_user and own:
        _say(_("--trial-user: recipe {recipes} has its own repository or environment, which "
               "cannot run under --trial-user yet; start this worker without --trial-user, or "
               "use a recipe file without them", recipes=", ".join(own)))
        return None
    try:
        offer.check_models(args.models)
    except offer.StartError as exc:
        _say(str(exc))
        return None
    return recipes


def _executor(args, user, info: dict):
    """What runs a trial: None (a child here), as --trial-user, or Slurm;
    for Slurm, `info` takes the partition's hardware."""
    executor: Callable[..., Report] | None = None  # called like attempts.run
    if user:
        from worker import attempts
        executor = functools.partial(attempts.run, user=user)
    if args.executor == "slurm":
        from worker.slurm import SlurmExecutor, partition_info
        executor = SlurmExecutor(args.partition, args.account, args.shared_dir, args.recipes,
                                 args.mem, args.gpus, args.sbatch_arg)
        # Routing reads what the partition's nodes have, not this login node.
        info.update(partition_info(args.partition), executor="slurm", partition=args.partition)
    return executor


def _serve(agent) -> int:
    from worker.client import ApiError, CertError
    try:
        agent.serve_forever()
    except CertError as exc:
        _say(str(exc))
        return 2
    except ApiError as exc:
        _say(_("the server refused this worker: {why}; check --token-file, --token or "
               "TRIALBOT_WORKER_TOKEN", why=exc) if exc.status == 401 else
             _("the server refused this worker: {why}", why=exc))
        return 2
    finally:
        agent.stop()
    return 0


def _stop_on_signals(signals, started: list, grace: float) -> None:
    """The first SIGTERM or Ctrl-C: no new trial, and the running one has
    `grace` seconds to end and report; a second: stop now. Either way a trial
    that did not end goes back to the bot's queue, and the worker exits 0.
    A stop before the agent exists (`started` empty) ends the worker at once."""
    log = logging.getLogger("trialbot.worker")
    name = signals.next()
    if not started:  # it has leased nothing: nothing to hand back
        log.info("%s: stopped while starting", name)
        logging.shutdown()
        os._exit(0)
    agent = started[0]
    log.info("%s: stopping; the running trial (if any) has %g s to end", name, grace)
    agent.drain(name, grace)
    name = signals.next()
    log.info("%s again: stopping now", name)
    agent.stop(name)


MAX_GRACE = 86400


def _seconds(text: str) -> float | None:
    """--stop-grace as seconds, or None when it is not 0 to MAX_GRACE."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value <= MAX_GRACE else None  # NaN is neither


def _server_ok(server: str, ca_file: str | None) -> bool:
    """--server is an http(s) URL and --ca-file a CA bundle; else False, said."""
    from worker.client import ca_problem, server_problem
    problem = server_problem(server)
    if not problem and ca_file and not server.startswith("https://"):
        _warn(_("--ca-file is used only with an https:// server; {server} is plain HTTP, so "
                "the connection is not encrypted (fine through an SSH tunnel to localhost)",
                server=server))
    elif not problem and ca_file:
        problem = ca_problem(ca_file)
    if problem:
        _say(problem)
        return False
    return True


def _token(args) -> str | None:
    """The token: left in a pipe by this worker's previous image, else from
    --token-file, --token or the environment. Exits 2 on a bad source."""
    from worker import secrecy
    handed = secrecy.handed_over()
    if handed:
        return handed
    if args.token_file and args.token:
        _say(_("give the token once: --token-file or --token, not both"))
        raise SystemExit(2)
    if args.token_file:
        try:
            token, warning = secrecy.read_file(args.token_file)
        except secrecy.TokenError as exc:
            _say(str(exc))
            raise SystemExit(2) from None
        if warning:
            _warn(warning)
        return token
    if args.token:
        _warn(_("--token puts the token on the command line, where every user of this machine "
                "may read it (ps) until the worker hides it, and in shell history; use "
                "--token-file FILE or env TRIALBOT_WORKER_TOKEN"))
        return args.token
    return os.environ.get("TRIALBOT_WORKER_TOKEN")


def _trial_user(args, hidden: bool):
    """The --trial-user (exit 2 if refused), after warning what trials could
    still read of this worker."""
    from worker import trialuser
    try:
        user = trialuser.lookup(args.trial_user) if args.trial_user else None
    except trialuser.TrialUserError as exc:
        _say(str(exc))
        raise SystemExit(2) from None
    for warning in trialuser.warnings(user, hidden, args.token_file, args.executor == "slurm"):
        _warn(warning)
    return user


def machine_info() -> dict:
    from worker import machine
    return machine.info()


if __name__ == "__main__":
    sys.exit(main())
