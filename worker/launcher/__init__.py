"""Process isolation: run one trial try in fresh child processes and sample
them from outside.

A built-in workload runs as `python -m worker.child`, which measures phases and
the allocator from inside. A recipe runs the admin's argv with an injected
probe (`worker/probe/sitecustomize.py` on PYTHONPATH) and marks phases from
`TRIALBOT_PHASE <name>` lines on its stdout. Either way this side samples host
RSS and NVML at ~100 Hz, enforces the timeout, cancels by killing the child's
process group, and turns a child that died without finishing into a failed
report with the error class. Whatever happens, a report comes back.

Here: one try, from spec to report (run_trial), for a built-in workload or a
recipe. The child process is process.py's, the sampler sampler.py's, the
verdict on a child that did not finish judge.py's.
"""
from __future__ import annotations

import json
import os
import platform
import signal
import socket
import sys
import tempfile
import threading
import time

from worker import machine, threads, timeline, windows
from worker import report as reports
from worker.env import cpu_name
from worker.launcher import envbuild, failure, passes, processes, recipe_phases
from worker.launcher.judge import KERNEL_METHOD, judge, oom_kills, wait_gpu_released
from worker.launcher.process import PROBE_DIR, Run, builtin_env, child_env, pythonpath, read_json
from worker.launcher.sampler import SAMPLE_HZ
from worker.probes import contention
from worker.probes.host import HostRssTracker
from worker.probes.nvml import NvmlTracker
from worker.report import Memory, Phase, Report
from worker.reportparts import Threads
from worker.spec import SpecError, TrialSpec, check_params

ALLOCATOR_FIELDS = recipe_phases.PHASE_MEMORY + ("num_alloc_retries", "num_ooms")
KERNEL_PEAK = ("kernel max RSS of the child, which ran alone (wait4 rusage ru_maxrss: its "
               "high-water mark, which no 10 ms tick can miss; the ~100 Hz sampler's peak "
               "was {sampled:.1f} MiB)")
LIVE_NOTE = ("; glibc's mmap threshold pinned at 64 KiB (malloc=live), so freed tensors "
             "leave RSS: the live peak")


def run_trial(spec: TrialSpec, cancel: threading.Event | None = None, recipes=None,
              hz: float = SAMPLE_HZ, progress: dict | None = None, user=None) -> Report:
    """Run one try of `spec` in child processes and return its report (never
    raises for a failing trial: the failure is in the report). `user`, a
    worker.trialuser.TrialUser, runs the children as that user."""
    cancel = cancel or threading.Event()
    try:
        choice = threads.choose(spec.params.get("threads", 0), threads.usable_cores(),
                                spec.params.get("world", 1))
    except SpecError as exc:
        return _refused(spec, exc.message)
    if passes.applies(spec):  # memory and time each under the allocator that suits it
        return passes.run(spec, run_trial, cancel, recipes=recipes, hz=hz, progress=progress,
                          user=user)
    if "processes" in spec.params:  # time from fresh processes, each run without the key
        return processes.run(spec, run_trial, cancel, recipes=recipes, hz=hz,
                             progress=progress, user=user)
    timeout = spec.params.get("timeout", 1800)
    deadline = time.monotonic() + timeout
    host, nvml = HostRssTracker(), NvmlTracker()
    busy = contention.ContentionTracker(cores=choice.cores if choice.pinned else None)
    trackers = [host, nvml, busy]
    kills_before = oom_kills()
    started, clock = time.time(), time.monotonic()  # the clock: a duration never goes back
    if spec.recipe:
        report, run = _run_recipe(spec, choice, recipes or {}, deadline, cancel, trackers, hz,
                                  progress, user)
    else:
        report, run = _run_builtin(spec, choice, deadline, cancel, trackers, hz, progress, user)
    report["threads"] = _threads(choice, report.pop("threads_seen", None), spec)
    if run is not None:
        killed_by_kernel = (run.code == -signal.SIGKILL and not run.stopped
                            and oom_kills() not in (None, kills_before))
        hint = report.pop("phase_at_exit", None)  # where the program's probe last saw it
        judge(report, run, timeout, killed_by_kernel,
              hint if any(p["name"] == hint for p in report["phases"]) else None)
        _sampled(report, run, spec, choice, trackers, hz)
    report["env"]["driver"] = nvml.driver()
    nvml.close()
    report["started"] = report.get("started") or started
    report["finished"] = time.time()
    report["seconds"] = time.monotonic() - clock
    return report


def _sampled(report: Report, run: Run, spec: TrialSpec, choice, trackers: list, hz: float) -> None:
    """What this side sampled of a child that ran: memory, contention, the timeline."""
    host, nvml, busy = trackers
    _memory(report["memory"], run, spec, host, nvml)
    report["contention"] = busy.result(report["phases"], recipe=bool(spec.recipe),
                                       gpu=nvml.contention(), free=choice.free)
    windows.annotate(report.get("windows"), busy.share, contention.OTHERS_CPU,
                     contention.STEAL)
    report["timeline"] = timeline.build(run.sampler.rows, report.pop("allocator_samples", []))
    timeline.host_by_phase(report, run.sampler.rows, hz)
    report["probe"] = {"hz": hz, "samples": len(run.sampler.rows),
                       "sampler_cpu_seconds": run.sampler.cpu_seconds,
                       "what": "worker-side sampling thread: its own CPU time, the cost "
                               "of measuring (scripts/bench_probes.py compares on/off)"}
    wait_gpu_released(nvml, run)


def _memory(memory: Memory, run: Run, spec: TrialSpec, host, nvml) -> None:
    """The trackers' peaks, and the kernel's max RSS where it says more than the worker's own."""
    for tracker in (host, nvml):
        memory.update(tracker.result())
        memory["method"].update(tracker.method)
    informative = run.max_rss is not None and run.max_rss > run.parent_rss
    memory["host_rss_peak_kernel"] = run.max_rss if informative else None
    sampled = memory.get("host_rss_peak")
    # A child that ran alone: the kernel's high-water mark repeats within 0.5 MiB;
    # the 100 Hz sampler misses short peaks by 0-8 MiB, noise a sweep's fit reads as a curve.
    if informative and sampled and len(run.sampler.pids) == 1:
        memory["host_rss_peak"] = run.max_rss
        memory["method"]["host_rss_peak"] = KERNEL_PEAK.format(sampled=sampled / 2**20)
    if spec.params.get("malloc") == "live":
        memory["method"]["host_rss_peak"] += LIVE_NOTE
    memory["method"]["host_rss_peak_kernel"] = KERNEL_METHOD if informative else (
        f"not measured: the kernel's max RSS ({(run.max_rss or 0) / 2**20:.0f} MiB) is no "
        f"more than the worker's own peak RSS at spawn ({run.parent_rss / 2**20:.0f} MiB), "
        "which Linux counts into the child's at exec")


def _run_builtin(spec, choice, deadline, cancel, trackers, hz, progress=None, user=None
                 ) -> tuple[Report, Run]:
    with tempfile.TemporaryDirectory(prefix="trialbot-") as tmp:
        spec_path, report_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "report.json")
        with open(spec_path, "w") as f:
            json.dump({**spec.to_dict(), "threads": choice.threads}, f)
        if user is not None:
            user.own(tmp)  # the child writes its report here
        env = {**builtin_env(spec), **choice.env()}  # the thread count torch starts with
        run = Run([sys.executable, "-m", "worker.child", spec_path, report_path], None, env,
                  deadline, cancel, trackers, hz, progress, user, _pin(choice))
        report = _read(report_path, spec)
    return report, run


def _run_recipe(spec, choice, recipes, deadline, cancel, trackers, hz, progress=None,
                user=None) -> tuple[Report, Run | None]:
    report = reports.new_report("recipe", spec.params)
    report["recipe"] = spec.recipe
    recipe = recipes.get(spec.recipe)
    if not _recipe_runs_here(report, spec, recipe):
        return report, None
    made = envbuild.make(recipe, deadline, cancel, user)  # its repository and environment
    report["env"].update(made.env)
    if made.phase is not None:
        report["phases"].append(made.phase)
    if made.run is not None:  # stopped by the timeout or a cancel: the judge names it
        return report, made.run
    if made.failure is not None:
        reports.fail(report, made.stopped or "environment", made.failure, "setup")
        return report, None
    env = _recipe_env(report, recipe, made, choice)
    run = _setup(report, recipe, made, env, deadline, cancel, user)
    if run is not None:
        return report, run
    with tempfile.TemporaryDirectory(prefix="trialbot-") as tmp:
        if user is not None:
            user.own(tmp)  # the probe writes here
        env.update(PYTHONPATH=pythonpath(PROBE_DIR, env.get("PYTHONPATH")),
                   TRIALBOT_PROBE_OUT=tmp)
        argv = recipe.command({**spec.params, "threads": choice.threads}, made.python)
        run = Run(argv, made.cwd, env, deadline, cancel, trackers, hz, progress, user,
                  _pin(choice))
        probe = _probe_result(tmp, run)
    _recipe_report(report, recipe, made, run, probe)
    return report, run


def _recipe_runs_here(report: Report, spec: TrialSpec, recipe) -> bool:
    """The recipe is in this worker's file, takes these params and finds what
    it requires here; else the report says why not. Sets the report's env."""
    if recipe is None:
        reports.fail(report, "unsupported", f"recipe `{spec.recipe}` is not in this worker's "
                     "recipe file; only recipes in the file can run", "setup")
        return False
    try:
        check_params(recipe.workload(), spec.params)
    except SpecError as exc:
        reports.fail(report, "unsupported", f"refused by this worker's recipe file: "
                     f"{exc.message}", "setup")
        return False
    gpus = machine.gpus()
    report["env"] = {"device": "cpu or unknown (the probe saw no CUDA allocator)",
                     "host": socket.gethostname(),
                     "os": f"{platform.system()} {platform.release()}",
                     "cpu": cpu_name(), "python": None, "gpu_count": len(gpus),
                     "gpu_name": gpus[0]["name"] if gpus else None,
                     "gpu_memory": gpus[0]["memory"] if gpus else None}
    if recipe.requires == "cuda" and not machine.has_cuda():
        reports.fail(report, "unsupported", f"recipe `{recipe.name}` requires CUDA and this "
                     "worker has none (NVML sees no NVIDIA GPU and torch no CUDA device)",
                     "setup")
        return False
    return True


def _recipe_env(report: Report, recipe, made, choice) -> dict:
    """The report's code version, and the environment the recipe's commands run in."""
    from worker import codeversion
    report["env"]["recipe_cwd"] = made.cwd
    if "code_commit" not in made.env:  # a checkout's was read before its build
        report["env"].update(codeversion.of(made.cwd))
    if made.env.get("environment"):  # another environment is other code
        report["env"]["code_version"] += f", environment {made.env['environment']['key'][:12]}"
    env = child_env(**{**choice.env(), **recipe.env})  # the recipe's own count wins
    if made.path_dirs:
        env["PATH"] = os.pathsep.join([*made.path_dirs, env.get("PATH", os.defpath)])
        env["VIRTUAL_ENV"] = os.path.dirname(made.path_dirs[0])
    return env


def _setup(report: Report, recipe, made, env: dict, deadline, cancel, user) -> Run | None:
    """The admin's own setup commands (deps, weights): the one that failed or
    was stopped, else None; the setup phase goes in the report."""
    start = time.time()
    for argv in recipe.setup:
        run = Run(list(argv), made.cwd, env, deadline, cancel, user=user)
        if run.code != 0 or run.stopped:
            report["phases"].append(_setup_phase(start, time.time()))
            return run
    if recipe.setup:
        report["phases"].append(_setup_phase(start, time.time()))
    return None


def _recipe_report(report: Report, recipe, made, run: Run, probe: dict) -> None:
    """The recipe's run as the report tells it: phases, results, memory from its probe."""
    spec_env = recipe.environment
    named = (failure.environment_error(probe, made.cwd, made.pins, spec_env.declared,
                                       spec_env.declared and spec_env.torch == "worker")
             if run.code not in (0, None) and not run.stopped else None)
    if named:  # a module it cannot import, a library of another version
        reports.fail(report, "environment", f"{named[0]}\n{run.tail()[-1500:]}", named[1])
    report["phases"] += recipe_phases.phases(run, probe.get("phases", []))
    if named and report["phases"][-1]["found_by"] == "whole-program":
        report["phases"][-1]["name"] = named[1]  # it never got past its imports
    report["phase_at_exit"] = probe.get("phase_at_exit")
    report.update(recipe_phases.results(probe, report["phases"], recipe.unit, run.seconds))
    report["output_tail"] = run.tail()  # what the paper's script printed: its own results
    report["memory"].update(probe.get("totals", {}))
    report["memory"]["method"].update(probe.get("method") or {
        k: "not measured: the probe saw no CUDA allocator in the recipe's process (a CPU "
           "program, or not Python)" for k in ALLOCATOR_FIELDS})
    report["allocator_samples"] = probe.get("samples", [])
    report["env"].update(probe.get("env", {}))
    report["threads_seen"] = {"torch_threads": probe.get("torch_threads")}
    if run.code == 0 and not run.stopped:
        report["status"] = "ok"


def _probe_result(directory: str, run: Run) -> dict:
    """The probe file of the recipe's main process, else the Python process
    that held the most GPU memory, else the one that made the most run units
    (a launcher script may start the real one)."""
    found = [read_json(os.path.join(directory, n)) for n in sorted(os.listdir(directory))
             if n.endswith(".json")]
    found = [f for f in found if f]
    main = None
    if run.proc is not None:
        main = read_json(os.path.join(directory, f"probe-{run.proc.pid}.json"))
        if main and (main.get("totals") or main.get("units")):
            return main
    with_gpu = [f for f in found if f.get("totals")]
    if with_gpu:
        return max(with_gpu, key=lambda f: f["totals"]["peak_allocated"])
    with_units = [f for f in found if f.get("units")]
    if with_units:
        return max(with_units, key=lambda f: f.get("units_seen", 0))
    return main or (found[0] if found else {})


def _setup_phase(start: float, end: float) -> Phase:
    return {"name": "setup", "start": start, "end": end, "seconds": end - start,
            "found_by": "recipe-setup"}


def _read(path: str, spec: TrialSpec) -> Report:
    return read_json(path) or reports.new_report(spec.workload, spec.params)


def _pin(choice: threads.ThreadChoice) -> tuple[int, ...]:
    return choice.cores if choice.pinned else ()


def _threads(choice: threads.ThreadChoice, seen: Threads | None, spec: TrialSpec) -> Threads:
    """The report's `threads`: the choice, and what the child's torch ran with."""
    out: Threads = {**choice.to_report(), "torch_threads": None, "cores_seen": None}
    out.update(seen or {})
    if out["torch_threads"] is None:
        out["torch_threads_method"] = (
            "not read: the recipe's program did not import torch, or did not exit through "
            "Python" if spec.recipe else "not read: the child ended before it set them")
    elif spec.recipe:
        out["torch_threads_method"] = ("torch.get_num_threads() in the recipe's process at "
                                       "exit (the probe): a program that sets its own count "
                                       "wins over the worker's OMP_NUM_THREADS")
    else:
        out["torch_threads_method"] = "torch.get_num_threads() in the child after it set them"
    return out


def _refused(spec: TrialSpec, message: str) -> Report:
    """A try the worker cannot run as asked (e.g. more threads than cores)."""
    report = reports.new_report(spec.workload, spec.params)
    if spec.recipe:
        report["recipe"] = spec.recipe
    reports.fail(report, "unsupported", message, "setup")
    report["started"] = report["finished"] = time.time()
    report["seconds"] = 0.0
    return report
