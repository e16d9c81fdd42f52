"""The Slurm executor: run a leased trial as a Slurm batch job.

The worker runs on a cluster's login node. For each try it writes a job
directory on the shared filesystem (the spec and a batch script), submits it
with `sbatch`, follows it with `scontrol show job`, and reads the report the
job wrote there. Inside the allocation the job runs `python -m worker.slurm
job SPEC REPORT`: the same `attempts.run` as a plain worker, so the probe and
the host/NVML samplers measure on the compute node.

Slurm's end states become attempts (`outcome`): OUT_OF_MEMORY is oom, TIMEOUT
timeout, CANCELLED cancelled, NODE_FAIL/PREEMPTED/BOOT_FAIL a counted try that
is submitted again (up to the trial's `attempts`). Queue wait (sbatch accepted
→ the job started) is kept apart from run time in `report["slurm"]`: on a
rented cluster it is idle money.

State comes from `scontrol`, not `sacct`: it works without slurmdbd
(accounting storage), and ended jobs stay listed for the cluster's MinJobAge
(300 s by default), far longer than one poll.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from worker import redact
from worker import report as reports
from worker.launcher.process import read_json
from worker.report import Attempt, Report
from worker.reportparts import SlurmJob
from worker.spec import TrialSpec

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRACE = 120  # seconds on top of the trial's timeout: interpreter start, imports, the report
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
# Slurm end state → the attempt's error class; "retry" is a counted try run again.
STATE_CLASS = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "timeout", "DEADLINE": "timeout",
               "CANCELLED": "cancelled", "NODE_FAIL": "retry", "PREEMPTED": "retry",
               "BOOT_FAIL": "retry", "REVOKED": "retry"}
TAIL = 4000
MEMORY_KILL = "Exceeded job memory limit"


def outcome(state: str, has_report: bool, output: str = "") -> str | None:
    """The error class a job's end state gives its try: None when the job's
    own report stands as is, "retry" for a node lost under it."""
    state = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0" → CANCELLED
    if state in STATE_CLASS:
        return STATE_CLASS[state]
    if state in ("COMPLETED", "FAILED") and has_report:
        return None
    # Without cgroups slurmstepd's sampler enforces --mem: the job ends FAILED, not OUT_OF_MEMORY.
    if MEMORY_KILL in output:
        return "oom"
    return "crash"  # FAILED without a report: the job's entry itself died


class SubmitError(Exception):
    """sbatch refused the job; the message is sbatch's own."""


class Slurm:
    """The three commands the executor needs; tests may swap in a fake."""

    def submit(self, args: list[str], env: dict) -> str:
        proc = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                              env=env, timeout=120)
        if proc.returncode != 0:
            raise SubmitError((proc.stderr or proc.stdout).strip()
                              or f"sbatch exited with {proc.returncode}")
        return proc.stdout.strip().split(";")[0]  # "ID" or "ID;cluster"

    def show(self, job_id: str) -> dict[str, str] | None:
        """`scontrol show job` as a dict, or None once Slurm no longer lists it."""
        proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0:
            if "Invalid job id" in proc.stderr:
                return None
            raise OSError(f"scontrol: {proc.stderr.strip()}")
        fields: dict[str, str] = {}
        for word in proc.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def cancel(self, job_id: str) -> None:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)


class SlurmExecutor:
    """Called like `attempts.run(spec, cancel, recipes, progress)`."""

    def __init__(self, partition: str, account: str | None = None, shared_dir: str | None = None,
                 recipes_path: str | None = None, mem: str = "16G", gpus: str = "auto",
                 extra: list[str] | None = None, python: str = sys.executable,
                 slurm: Slurm | None = None, poll_max: float = 5.0):
        self.partition, self.account, self.mem, self.gpus = partition, account, mem, gpus
        self.shared_dir = os.path.abspath(shared_dir or os.path.expanduser("~/trialbot-slurm"))
        self.recipes_path = os.path.abspath(recipes_path) if recipes_path else None
        self.extra, self.python = list(extra or []), python
        self.slurm, self.poll_max = slurm or Slurm(), poll_max

    def __call__(self, spec: TrialSpec, cancel: threading.Event | None = None, recipes=None,
                 progress: dict | None = None) -> Report:
        cancel = cancel or threading.Event()
        progress = {} if progress is None else progress
        called = time.monotonic()  # wall_s is a duration: a clock stepped back must not shrink it
        trial_dir = os.path.join(self.shared_dir, f"trial-{uuid.uuid4().hex[:12]}")
        tries: list[Attempt] = []
        jobs: list[SlurmJob] = []
        try:
            while True:
                progress.update(attempt=len(tries) + 1, phase="submit")
                report, job = self._try(spec, cancel, progress,
                                        os.path.join(trial_dir, f"try-{len(tries) + 1}"))
                if job:
                    jobs.append(job)
                inner = report.get("attempts") or []
                if not job or job["outcome"]:  # Slurm's verdict replaces the job's last try
                    inner = inner[:-1] + [reports.attempt(len(inner) + 1, report, {})]
                retry = job and job.get("outcome") == "retry"
                if not retry or cancel.is_set() or len(tries) + 1 >= spec.params.get("attempts", 1):
                    for t in inner:  # the job's own tries (halve-batch) follow the resubmits
                        tries.append({**t, "attempt": len(tries) + 1})
                    break
                entry = reports.attempt(len(tries) + 1, report, {})
                entry["next"] = f"submitted again (Slurm {job['state']})"
                tries.append(entry)
                progress["failed"] = [*progress.get("failed", []), "killed"]
        finally:
            shutil.rmtree(trial_dir, ignore_errors=True)
        report["requested"] = report.get("requested") or dict(spec.params)
        report["attempts"] = tries
        report["seconds_lost"] = sum(t.get("seconds") or 0 for t in tries[:-1])
        report["slurm"] = {
            "partition": self.partition, "account": self.account,
            "job_id": jobs[-1]["job_id"] if jobs else None,
            "state": jobs[-1]["state"] if jobs else "REFUSED",
            "node": jobs[-1]["node"] if jobs else None,
            "queue_wait_s": sum(j["queue_wait_s"] or 0 for j in jobs),
            "run_s": sum(j["run_s"] or 0 for j in jobs),
            "wall_s": time.monotonic() - called,  # lease to collected report: the overhead
            "jobs": jobs,
        }
        return report

    def _try(self, spec: TrialSpec, cancel, progress, job_dir: str):
        """One submission: (report, job facts), job facts None if sbatch refused."""
        os.makedirs(job_dir, exist_ok=True)
        spec_path, report_path = (os.path.join(job_dir, n) for n in ("spec.json", "report.json"))
        out_path, started_path = (os.path.join(job_dir, n) for n in ("job.out", "started"))
        with open(spec_path, "w") as f:
            json.dump(spec.to_dict(), f)
        script = os.path.join(job_dir, "job.sh")
        with open(script, "w") as f:
            f.write(self.script(spec_path, report_path))
        t0 = time.time()
        try:
            job_id = self.slurm.submit(self.sbatch_args(spec, job_dir, out_path) + [script],
                                       _env())
        except (SubmitError, OSError, subprocess.TimeoutExpired) as exc:
            return self._refused(spec, exc, t0), None
        submitted = time.time()
        progress["phase"] = "queued"
        info, state = self._follow(job_id, cancel, progress, report_path)
        collected = time.time()
        started = _read_float(started_path)
        job_report = read_json(report_path)
        tail = _tail(out_path)
        klass = outcome(state, job_report is not None, tail)
        report = job_report or reports.new_report(spec.workload, spec.params)
        ended_at = _slurm_time(info.get("EndTime")) if info else None
        if started is None and info and info.get("StartTime") not in (None, "Unknown", "None"):
            started = _slurm_time(info["StartTime"])
        # max(0.0, ...): the times come from this machine's clock, the node's and
        # Slurm's; one a little behind another must not make a negative wait or run
        job: SlurmJob = {
            "job_id": job_id, "state": state, "node": (info or {}).get("NodeList"),
            "exit_code": (info or {}).get("ExitCode"), "outcome": klass,
            "submit_s": max(0.0, submitted - t0),
            "queue_wait_s": max(0.0, started - submitted) if started else None,
            "run_s": max(0.0, ((job_report or {}).get("finished") or ended_at or collected)
                         - started) if started else None}
        if klass:
            self._failed(report, job, klass, report_path, tail, started)
        began = report["started"] = report.get("started") or started or submitted
        ended = report["finished"] = report.get("finished") or collected
        report["seconds"] = report.get("seconds") or max(0.0, ended - began)
        report["env"] = report.get("env") or {"host": job["node"]}
        return report, job

    def _refused(self, spec: TrialSpec, exc: Exception, t0: float) -> Report:
        """The report of a job sbatch did not take: the controller unreachable
        (a crash, retried) or the job refused (unsupported)."""
        report = reports.new_report(spec.workload, spec.params)
        controller = "Unable to contact" in str(exc) or not isinstance(exc, SubmitError)
        reports.fail(report, "crash" if controller else "unsupported",
                     f"Slurm refused the job (partition `{self.partition}`"
                     + (f", account `{self.account}`" if self.account else "")
                     + "): " + "; ".join(str(exc).splitlines()), "setup")
        ended = time.time()
        report["started"], report["finished"], report["seconds"] = t0, ended, max(0.0, ended - t0)
        return report

    def _failed(self, report: Report, job: SlurmJob, klass: str, report_path: str, tail: str,
                started: float | None) -> None:
        """The report says how the job ended without finishing (`klass`, its
        outcome), in Slurm's words."""
        why = {"oom": "went over its memory limit (sbatch "
                      f"--mem {self.mem})",
               "timeout": "hit its Slurm time limit",
               "cancelled": "was cancelled",
               "retry": "lost its node",
               "crash": f"ended without a report at {report_path} (is --shared-dir "
                        "on a filesystem the compute nodes share?)"}[klass]
        err = report.get("error")
        message = (f"Slurm job {job['job_id']} {why}: state {job['state']}, exit code "
                   f"{job['exit_code']}, node {job['node']}\n"
                   + ((err["message"] if err else "") or tail))
        reports.fail(report, "killed" if klass == "retry" else klass, message,
                     (err.get("phase") if err else None) or ("run" if started else "setup"))

    def _follow(self, job_id: str, cancel, progress, report_path: str = ""
                ) -> tuple[dict[str, str] | None, str]:
        """Poll until the job ends; scancel it when the trial is cancelled.
        Polls quickly at first, then backs off to `poll_max`: a login node's
        scontrol calls load the controller. The report file appearing (a stat,
        no controller call) means the job is ending: ask again at once."""
        delay, last, info, cancelled = 0.2, None, None, False
        try:
            while True:
                if cancel.is_set() and not cancelled:
                    self.slurm.cancel(job_id)
                    cancelled, delay = True, 0.2
                try:
                    info = self.slurm.show(job_id) or info
                except (OSError, subprocess.TimeoutExpired):
                    pass  # the controller is busy: ask again
                if info is None:  # gone before we saw it end (MinJobAge elapsed)
                    return None, "CANCELLED" if cancelled else "UNKNOWN"
                state = info.get("JobState", "UNKNOWN")
                if state in ENDED:
                    return info, state
                if state != last:
                    progress["phase"] = ("queued" if state == "PENDING" else
                                         f"running on {info.get('NodeList')}"
                                         if state == "RUNNING" else state.lower())
                    last, delay = state, 0.2
                until = time.monotonic() + delay
                while not cancel.wait(0.1) and time.monotonic() < until:
                    if report_path and os.path.exists(report_path):
                        delay = 0.1
                        break
                delay = min(delay * 1.5, self.poll_max)
        except BaseException:  # the worker is stopping: never leave the job running
            self.slurm.cancel(job_id)
            raise

    def sbatch_args(self, spec: TrialSpec, job_dir: str, out_path: str) -> list[str]:
        timeout = spec.params.get("timeout", 1800)
        args = ["--job-name", f"trialbot-{spec.recipe or spec.workload}",
                "--partition", self.partition, "--time", str(math.ceil((timeout + GRACE) / 60)),
                "--mem", self.mem, "--nodes", "1", "--ntasks", "1", "--no-requeue",
                "--output", out_path, "--chdir", job_dir]
        if self.account:
            args += ["--account", self.account]
        gpus = gpus_for(spec) if self.gpus == "auto" else int(self.gpus)
        if gpus:
            args += ["--gpus", str(gpus)]
        return args + self.extra

    def script(self, spec_path: str, report_path: str) -> str:
        argv = [self.python, "-m", "worker.slurm", "job", spec_path, report_path]
        if self.recipes_path:
            argv += ["--recipes", self.recipes_path]
        return ("#!/bin/bash\n# written by trialbot-worker --executor slurm\n"
                f"export PYTHONPATH={shlex.quote(PACKAGE_ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                f"exec {shlex.join(argv)}\n")


def gres_gpus(gres: str) -> list[str]:
    """GPU names from sinfo's %G: `gpu:a100:4(S:0-1)` → ["a100"] * 4; a count
    without a type gives "gpu". `(null)` or nothing: no GPUs."""
    out = []
    for item in gres.split(","):
        parts = item.split("(")[0].strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1] if parts[-1].isdigit() else "1"
        name = parts[1] if len(parts) == 3 or not parts[1].isdigit() else "gpu"
        out += [name] * int(count)
    return out


def partition_info(partition: str) -> dict:
    """What trials on `partition` get, for routing: the GPUs of its largest node
    (from GRES) and its CPUs per node, not the login node's own hardware."""
    try:
        proc = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%G|%c"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rows = [line.split("|") for line in proc.stdout.split() if "|" in line]
    if proc.returncode != 0 or not rows:
        return {}
    gpus = max((gres_gpus(g) for g, _ in rows), key=len)
    cpus = max(int(c) for _, c in rows if c.isdigit()) if any(c.isdigit() for _, c in rows) \
        else None
    return {"gpus": gpus, "gpu_memory": [], "device": "cuda" if gpus else "cpu",
            "cpus": cpus}


def gpus_for(spec: TrialSpec) -> int:
    """GPUs to ask for: none for device=cpu, one per rank for training, else one."""
    if spec.params.get("device") == "cpu":
        return 0
    return int(spec.params.get("world", 1)) if spec.workload == "llm-train" else 1


def _env() -> dict:
    # sbatch copies its environment into the job: the worker's secrets stay out.
    return redact.without_secrets()


def _slurm_time(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _read_float(path: str) -> float | None:
    try:
        with open(path) as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL))
            return f.read().decode(errors="replace")
    except OSError:
        return "(no job output)"


def job_main(argv: list[str]) -> int:
    """Inside the allocation: run the trial as a plain worker would and write
    its report (atomically) for the login node."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m worker.slurm job")
    parser.add_argument("spec")
    parser.add_argument("report")
    parser.add_argument("--recipes")
    opts = parser.parse_args(argv)
    with open(os.path.join(os.path.dirname(opts.report), "started"), "w") as f:
        f.write(f"{time.time()} {socket.gethostname()}\n")
    # scancel and the time limit send SIGTERM: unwind so the launcher kills the trial's group.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    from worker import attempts
    from worker import recipes as recipe_file
    from worker.spec import resolve
    recipes = recipe_file.load(opts.recipes) if opts.recipes else {}
    with open(opts.spec) as f:
        spec = resolve(TrialSpec.from_dict(json.load(f)), recipes)
    report = attempts.run(spec, recipes=recipes)
    report["worker"] = socket.gethostname()
    tmp = opts.report + ".partial"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, opts.report)
    return 0  # a failed trial is in the report; a non-zero exit means the entry itself broke


if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        sys.exit(job_main(sys.argv[2:]))
    sys.exit("usage: python -m worker.slurm job SPEC REPORT [--recipes FILE]")
