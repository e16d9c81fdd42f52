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
from worker import slurm
from worker.slurm import SlurmExecutor, SubmitError, outcome
from worker.spec import TrialSpec, parse, resolve

TEST_CONF = "/tmp/trialbot-slurm/slurm.conf"  # scripts/slurm-test-cluster's default
if "SLURM_CONF" not in os.environ and os.path.exists(TEST_CONF):
    os.environ["SLURM_CONF"] = TEST_CONF  # workers started by the tests inherit it
FAST = "llm-infer gen=2 repeats=1 stability=0"


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
                                     "timeout=2"))
    assert report["status"] == "failed"
    assert report["error"]["class"] == "timeout"
    assert report["slurm"]["state"] == "COMPLETED"  # the trial's own timeout, inside the job


def test_a_job_over_its_memory_limit_is_an_oom(cluster, tmp_path):
    # No cgroups here: slurmstepd's sampler (OverMemoryKill) kills the step, state FAILED.
    report = executor(tmp_path, mem="150M")(spec(FAST))
    assert report["status"] == "failed", report
    assert report["error"]["class"] == "oom", report["error"]
    assert "memory limit" in report["error"]["message"]


def test_cancel_scancels_the_job(cluster, tmp_path):
    cancel, progress, out = threading.Event(), {}, {}
    run = threading.Thread(target=lambda: out.update(r=executor(tmp_path)(
        spec("llm-infer repeats=10000 stability=0 run_cap=600"), cancel, None, progress)))
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
                          "--partition", "nope", "--shared-dir", str(tmp_path / "shared"), "--gpus", "0")
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
