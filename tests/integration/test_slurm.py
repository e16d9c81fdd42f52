"""The Slurm executor against a real single-node Slurm (scripts/slurm-test-cluster),
and its state mapping and resubmits as pure functions.

Tests that need Slurm skip where `sinfo` is not on PATH (a developer's machine)
and fail instead when TRIALBOT_REQUIRE_SLURM=1 (.ci/run sets it)."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import BIN, ROOT
from slackfake import post, signed_headers, slash_body
from worker import slurm, units
from worker.slurm import SlurmExecutor, SubmitError, outcome
from worker.spec import TrialSpec, parse, resolve

TEST_CONF = "/tmp/trialbot-slurm/slurm.conf"  # scripts/slurm-test-cluster's default
if "SLURM_CONF" not in os.environ and os.path.exists(TEST_CONF):
    os.environ["SLURM_CONF"] = TEST_CONF  # workers started by the tests inherit it
FAST = "llm-infer gen=2 repeats=1 stability=0 processes=1"


@pytest.fixture(scope="module")
def cluster():
    why = None
    if not shutil.which("sinfo"):
        why = "sinfo is not on PATH (install slurm-client and run scripts/slurm-test-cluster start)"
    else:
        proc = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%T"], capture_output=True,
                              text=True, timeout=30)
        if proc.returncode != 0 or not proc.stdout.strip():
            why = f"no Slurm partition `debug` here ({proc.stderr.strip()}): run " \
                  "scripts/slurm-test-cluster start"
    if why:
        if os.environ.get("TRIALBOT_REQUIRE_SLURM") == "1":
            pytest.fail(f"TRIALBOT_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)


def executor(tmp_path, **kw) -> SlurmExecutor:
    return SlurmExecutor(kw.pop("partition", "debug"), shared_dir=str(tmp_path / "shared"),
                         mem=kw.pop("mem", "2G"), gpus="0", **kw)


def spec(words: str) -> TrialSpec:
    return resolve(parse(words.split()))


def test_a_trial_runs_as_a_job_with_the_probes_measurements_and_queue_wait(cluster, tmp_path):
    report = executor(tmp_path)(spec(FAST))
    assert report["status"] == "ok", report.get("error")
    s = report["slurm"]
    assert s["state"] == "COMPLETED" and s["partition"] == "debug" and s["node"]
    assert s["job_id"].isdigit()
    assert 0 <= s["queue_wait_s"] < 30 and s["run_s"] > 0
    assert s["wall_s"] >= s["queue_wait_s"] + report["seconds"] * 0.9
    # the same measurements as a plain worker: sampled inside the allocation
    assert report["memory"]["host_rss_peak"] > 0 and report["probe"]["samples"] > 0
    assert report["latency"]["count"] >= 1 and report["timeline"]
    assert [a["status"] for a in report["attempts"]] == ["ok"]
    assert not (tmp_path / "shared").exists() or not list((tmp_path / "shared").iterdir())
    from worker import summary
    assert "Slurm: job " in summary.text(report) and "queue wait" in summary.text(report)


def test_a_trial_over_its_timeout_is_a_timeout(cluster, tmp_path):
    report = executor(tmp_path)(spec("llm-infer repeats=10000 stability=0 run_cap=600 "
                                     "timeout=2 processes=1"))
    assert report["status"] == "failed"
    assert report["error"]["class"] == "timeout"
    assert report["slurm"]["state"] == "COMPLETED"  # the trial's own timeout, inside the job


def test_a_job_over_its_memory_limit_is_an_oom(cluster, tmp_path):
    # No cgroups here: slurmstepd's sampler (OverMemoryKill) kills the step, state FAILED.
    # It samples once a second, so the trial runs for seconds: a shorter one can end first.
    report = executor(tmp_path, mem="150M")(spec("llm-infer gen=2 repeats=10000 stability=0 "
                                                 "run_cap=5 processes=1"))
    assert report["status"] == "failed", report
    assert report["error"]["class"] == "oom", report["error"]
    assert "memory limit" in report["error"]["message"]


def test_cancel_scancels_the_job(cluster, tmp_path):
    cancel, progress, out = threading.Event(), {}, {}
    run = threading.Thread(target=lambda: out.update(r=executor(tmp_path)(
        spec("llm-infer repeats=10000 stability=0 run_cap=600 processes=1"), cancel, None,
        progress)))
    run.start()
    deadline = time.monotonic() + 60
    while not str(progress.get("phase", "")).startswith("running"):
        assert time.monotonic() < deadline, progress
        time.sleep(0.1)
    cancel.set()
    run.join(60)
    assert not run.is_alive()
    report = out["r"]
    assert report["error"]["class"] == "cancelled" and report["slurm"]["state"] == "CANCELLED"


def test_a_partition_that_does_not_exist_is_a_clear_failed_report(cluster, tmp_path):
    report = executor(tmp_path, partition="nope")(spec(FAST))
    assert report["status"] == "failed" and report["error"]["class"] == "unsupported"
    assert "invalid partition specified: nope" in report["error"]["message"]
    assert "partition `nope`" in report["error"]["message"]
    assert len(report["attempts"]) == 1 and report["slurm"]["state"] == "REFUSED"
    from worker import report as reports
    assert reports.validate(report) == []


@pytest.mark.parametrize("state,has_report,output,expected", [
    ("COMPLETED", True, "", None),
    ("FAILED", True, "", None),
    ("FAILED", False, "Traceback ...", "crash"),
    ("COMPLETED", False, "", "crash"),
    ("FAILED", False, "slurmstepd: error: Exceeded job memory limit", "oom"),
    ("OUT_OF_MEMORY", False, "", "oom"),
    ("OUT_OF_MEMORY", True, "", "oom"),
    ("TIMEOUT", False, "", "timeout"),
    ("DEADLINE", False, "", "timeout"),
    ("CANCELLED", False, "", "cancelled"),
    ("CANCELLED by 0", True, "", "cancelled"),
    ("NODE_FAIL", False, "", "retry"),
    ("PREEMPTED", False, "", "retry"),
    ("BOOT_FAIL", False, "", "retry"),
])
def test_slurm_states_map_to_attempts(state, has_report, output, expected):
    assert outcome(state, has_report, output) == expected


class FakeSlurm:
    """Ends each submitted job in the next of `states`, writing no report."""

    def __init__(self, states):
        self.states, self.submitted, self.cancelled = list(states), [], []

    def submit(self, args, env):
        assert not any(k.startswith("TRIALBOT_") for k in env)  # secrets stay out of the job
        self.submitted.append(args)
        if not self.states:
            raise SubmitError("sbatch: error: out of states")
        return str(len(self.submitted))

    def show(self, job_id):
        return {"JobState": self.states.pop(0), "NodeList": "n1", "ExitCode": "0:9",
                "StartTime": "2026-01-01T00:00:00", "EndTime": "2026-01-01T00:00:05"}

    def cancel(self, job_id):
        self.cancelled.append(job_id)


def test_node_fail_and_preemption_are_counted_tries_submitted_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIALBOT_WORKER_TOKEN", "secret")
    fake = FakeSlurm(["NODE_FAIL", "PREEMPTED", "TIMEOUT"])
    report = executor(tmp_path, slurm=fake)(spec(FAST + " attempts=5"))
    assert len(fake.submitted) == 3
    assert [(a["attempt"], a["error_class"]) for a in report["attempts"]] == [
        (1, "killed"), (2, "killed"), (3, "timeout")]
    assert report["attempts"][0]["next"] == "submitted again (Slurm NODE_FAIL)"
    assert report["error"]["class"] == "timeout" and report["slurm"]["state"] == "TIMEOUT"
    assert [j["state"] for j in report["slurm"]["jobs"]] == ["NODE_FAIL", "PREEMPTED", "TIMEOUT"]


def test_resubmits_stop_at_the_trials_attempts(tmp_path):
    fake = FakeSlurm(["NODE_FAIL"] * 5)
    report = executor(tmp_path, slurm=fake)(spec(FAST + " attempts=2"))
    assert len(fake.submitted) == 2 and len(report["attempts"]) == 2
    assert report["status"] == "failed" and report["error"]["class"] == "killed"
    assert "lost its node" in report["error"]["message"]


def test_sbatch_arguments_follow_the_trial(tmp_path):
    ex = SlurmExecutor("gpu", "proj", str(tmp_path), mem="32G", extra=["--qos=low"])
    args = ex.sbatch_args(spec("llm-train world=2 timeout=600"), "/d", "/d/job.out")
    assert args[args.index("--time") + 1] == "12"  # (600 s + 120 s grace) in whole minutes
    assert args[args.index("--gpus") + 1] == "2" and args[args.index("--account") + 1] == "proj"
    assert args[args.index("--mem") + 1] == "32G" and args[-1] == "--qos=low"
    assert "--gpus" not in ex.sbatch_args(spec("llm-infer device=cpu"), "/d", "/d/o")
    script = ex.script("/d/spec.json", "/d/report.json")
    assert "-m worker.slurm job /d/spec.json /d/report.json" in script


def test_trial_from_slash_command_through_a_slurm_worker(cluster, served_bot, start_worker,
                                                         fake_slack, bot_env, tmp_path):
    start_worker(served_bot.url, "hpc", "wtoken", "--executor", "slurm", "--partition", "debug",
                 "--shared-dir", str(tmp_path / "shared"), "--mem", "2G", "--gpus", "0")
    body = slash_body(FAST)
    assert post(served_bot.url + "/slack/events", body, signed_headers("s3cret", body))[0] == 200
    started, report = fake_slack.wait_posts(2, timeout=120)
    assert "T1* started on *hpc*" in started["text"]
    assert "T1 llm-infer ok on hpc" in report["text"]
    assert "Slurm: job " in report["text"] and "on debug/" in report["text"]
    assert "queue wait" in report["text"]
    with sqlite3.connect(bot_env["TRIALBOT_DB"]) as db:
        info = json.loads(db.execute("select info from workers where name = 'hpc'").fetchone()[0])
    assert info["executor"] == "slurm" and info["partition"] == "debug"


def test_a_refused_partition_is_reported_and_the_worker_keeps_serving(
        cluster, served_bot, start_worker, fake_slack, bot_env, tmp_path):
    worker = start_worker(served_bot.url, "hpc", "wtoken", "--executor", "slurm",
                          "--partition", "nope", "--shared-dir", str(tmp_path / "shared"),
                          "--gpus", "0")
    for _ in range(2):
        body = slash_body(FAST)
        assert post(served_bot.url + "/slack/events", body,
                    signed_headers("s3cret", body))[0] == 200
    posts = fake_slack.wait_posts(4, timeout=90)
    failed = [p["text"] for p in posts if "FAILED" in p["text"]]
    assert len(failed) == 2 and all("(unsupported, phase setup)" in t for t in failed)
    assert "invalid partition specified: nope" in failed[0], failed[0]
    assert worker.p.poll() is None  # still serving
    with sqlite3.connect(bot_env["TRIALBOT_DB"]) as db:
        tries = db.execute("select job, status, error_class from attempts order by job").fetchall()
    assert tries == [(1, "failed", "unsupported"), (2, "failed", "unsupported")]


def test_serve_refuses_slurm_without_a_partition(tmp_path):
    proc = subprocess.run([str(BIN / "trialbot-worker"), "--server", "http://127.0.0.1:9",
                           "--token", "t", "--executor", "slurm"], capture_output=True,
                          text=True, cwd=ROOT, timeout=30)
    assert proc.returncode == 2 and "--executor slurm needs --partition" in proc.stderr



@pytest.mark.parametrize("gres, gpus", [
    ("gpu:a100:4(S:0-1)", ["a100"] * 4), ("gpu:2", ["gpu"] * 2), ("(null)", []),
    ("gpu:h100:8,shard:16", ["h100"] * 8), ("", []),
])
def test_a_partitions_gres_names_its_gpus(gres, gpus):
    assert slurm.gres_gpus(gres) == gpus


def test_the_test_clusters_partition_is_described_for_routing():
    if not shutil.which("sinfo"):
        pytest.skip("no Slurm here")
    info = slurm.partition_info("debug")
    if not info and not os.environ.get("TRIALBOT_REQUIRE_SLURM"):
        pytest.skip("the test cluster is not running")
    assert info["gpus"] == [] and info["device"] == "cpu" and info["cpus"] >= 1
    assert slurm.partition_info("no-such-partition") == {}


# --- Slurm actuals: sacct against the real cluster (accounting through slurmdbd) ------

ALLOC = "import time; b = bytearray(100 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep({})"


def sbatch_alloc(tmp_path, sleep: float = 2) -> str:
    """A real short job: a python that touches ~100 MiB and sleeps."""
    script = tmp_path / f"alloc-{time.monotonic_ns()}.sh"
    script.write_text(f"#!/bin/bash\nexec python3 -c \"{ALLOC.format(sleep)}\"\n")
    proc = subprocess.run(["sbatch", "--parsable", "--mem", "1G", "--job-name", "alloc",
                           "--output", str(tmp_path / "alloc-%j.out"), str(script)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def sacct_until(job_id: str, done, timeout: float = 60) -> dict:
    """Poll sacct until `done(record)`: slurmctld sends job and step records to
    slurmdbd on its own schedule, a little after the job itself moves on."""
    from worker import sacct
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        result = sacct.query([job_id])
        last = result
        mine = [r for r in result.get("records", []) if r["job_id"] == job_id]
        if mine and done(mine[0]):
            return mine[0]
        time.sleep(0.3)
    raise AssertionError(f"sacct never showed job {job_id} as wanted: {last}")


def ended(record: dict) -> bool:
    return record["state"] == "COMPLETED" and record["max_rss"] is not None


def test_sacct_reads_a_real_jobs_elapsed_and_maxrss(cluster, tmp_path):
    job_id = sbatch_alloc(tmp_path)
    record = sacct_until(job_id, ended)
    assert record["elapsed_s"] >= 2 and record["elapsed_s"] < 30
    # 100 MiB touched by python (≈10 MiB of its own): the batch step's MaxRSS.
    assert 100 * 2**20 <= record["max_rss"] < 400 * 2**20, record
    assert record["gpus"] == 0 and record["max_rss_step"] == f"{job_id}.batch"
    assert record["gpu_tres_max"] == {}  # no GPUs here: usage not gathered, not zero


def test_a_slurm_actual_from_slash_command_through_a_slurm_worker(
        cluster, served_bot, start_worker, fake_slack, bot_env, tmp_path):
    start_worker(served_bot.url, "hpc", "wtoken", "--executor", "slurm", "--partition", "debug",
                 "--shared-dir", str(tmp_path / "shared"), "--mem", "2G", "--gpus", "0")

    def slash(text, command="/plan"):
        body = slash_body(text, command)
        status, reply = post(served_bot.url + "/slack/events", body,
                             signed_headers("s3cret", body))
        assert status == 200, reply
        return reply["text"] if isinstance(reply, dict) else reply

    def posted(needle, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [p["text"] for p in fake_slack.posts() if needle in p["text"]]
            if hits:
                return hits[-1]
            time.sleep(0.1)
        raise AssertionError(f"no post with {needle!r}: {[p['text'] for p in fake_slack.posts()]}")

    slash(FAST, "/trial")
    posted("T1 llm-infer ok on hpc", timeout=120)
    assert "started" in slash("new repro")
    assert "baseline block added" in slash("repro block baseline runs=1 trial=T1")

    job_id = sbatch_alloc(tmp_path, sleep=6)
    sacct_until(job_id, lambda r: r["state"] == "RUNNING")
    out = slash(f"repro actual baseline slurm={job_id}")
    assert "Asked a Slurm worker (hpc online)" in out and "request A1" in out
    assert f"job {job_id} (RUNNING) has not ended" in posted("has not ended")

    slash("repro actual baseline slurm=999999")
    assert "sacct does not know job 999999" in posted("does not know")

    sacct_until(job_id, ended)
    slash(f"repro actual baseline slurm={job_id} runs=1")
    text = posted("Recorded for *repro* baseline")
    assert "node-h actual" in text and f"jobs {job_id} COMPLETED" in text
    with sqlite3.connect(bot_env["TRIALBOT_DB"]) as db:
        hours, note = db.execute("select hours, note from actuals").fetchone()
        result = json.loads(db.execute("select result from slurm_actuals where actual is not "
                                       "null").fetchone()[0])
    [record] = result["records"]
    assert 6 <= record["elapsed_s"] < 30 and hours == pytest.approx(record["elapsed_s"] / 3600)
    assert 100 * 2**20 <= record["max_rss"] < 400 * 2**20, record
    assert f"MaxRSS max {units.size(record['max_rss'])} ({job_id}.batch)" in note
    review = slash("repro review")
    assert f"from Slurm accounting: jobs {job_id} COMPLETED" in review, review
    with sqlite3.connect(bot_env["TRIALBOT_DB"]) as db:  # the three asks, each answered
        assert db.execute("select status, actual is not null from slurm_actuals order by id"
                          ).fetchall() == [("failed", 0), ("failed", 0), ("done", 1)]



class RunningSlurm(FakeSlurm):
    """A job that runs until it is scancelled."""

    def __init__(self):
        super().__init__([])

    def submit(self, args, env):
        self.submitted.append(args)
        return str(len(self.submitted))

    def show(self, job_id):
        state = "CANCELLED" if job_id in self.cancelled else "RUNNING"
        return {"JobState": state, "NodeList": "n1", "ExitCode": "0:15",
                "StartTime": "2026-01-01T00:00:00", "EndTime": "Unknown"}


def test_a_stopping_slurm_worker_scancels_its_job_and_hands_the_trial_back(tmp_path):
    import io

    from bot.app.console import ConsoleTransport
    from bot.app.runtime import Runtime
    from worker.agent import Agent
    from worker.client import Client
    rt = Runtime(str(tmp_path / "s.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)))
    rt.start()
    fake = RunningSlurm()
    agent = Agent(Client(rt.server.url, "tok"), "login-1", executor=executor(tmp_path, slurm=fake))
    serving = threading.Thread(target=agent.serve_forever, daemon=True)
    serving.start()
    try:
        job = rt.queue.submit(parse(FAST.split()), FAST, "U1", "C1")
        deadline = time.monotonic() + 30
        while not fake.submitted:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        agent.drain("SIGTERM", grace=0.2)
        serving.join(10)
        assert not serving.is_alive() and fake.cancelled == ["1"]
        row = rt.store.job(job["id"])
        assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0)
    finally:
        agent.stop()
        rt.stop()
