"""Slurm actuals without a cluster: sacct's output parsed (recorded lines), the
actual it gives, `/plan NAME actual KIND slurm=...` answered and queued, and the
request leased and answered through the queue and the worker API as a Slurm
worker does. The live path is in tests/test_slurm.py."""
import datetime as dt
import json

import pytest

from bot import commands
from bot.app.runtime import context
from bot.http.workerapi import WorkerApi
from bot.plans import actualparse as plancmd
from bot.plans import service
from bot.plans import slurm as slurmactual
from bot.plans.parse import PlanError
from bot.states import ActualStatus
from bot.store import Store
from bot.trials.queue import JobQueue
from test_planner import report
from test_plans import finish
from worker import sacct

TODAY = dt.date(2026, 12, 1)

# Recorded on the test cluster (scripts/slurm-test-cluster, Slurm 22.05.8): a python
# that touches 100 MiB and sleeps 2 s, `sacct --parsable2 --noheader --noconvert`.
LIVE = """\
1|alloc.sh|COMPLETED|2|billing=1,cpu=1,mem=500M,node=1|||
1.batch|batch|COMPLETED|2|cpu=1,mem=500M,node=1|121741312|cpu=00:00:00,energy=0,fs/disk=1693941,\
mem=121741312,pages=0,vmem=126304256|cpu=00:00:00,energy=0,fs/disk=1693941,mem=121741312,pages=0,\
vmem=126304256
"""
# The same job without --noconvert: sizes rounded to K.
LIVE_CONVERTED = """\
1|alloc.sh|COMPLETED|2|billing=1,cpu=1,mem=500M,node=1|||
1.batch|batch|COMPLETED|2|cpu=1,mem=500M,node=1|118888K|cpu=00:00:00,energy=0,fs/disk=1693941,\
mem=118888K,pages=0,vmem=123344K|cpu=00:00:00,energy=0,fs/disk=1693941,mem=118888K,pages=0,\
vmem=123344K
"""
# A GPU job: the step's TRESUsageInMax is the one CU Boulder's Research Computing
# documents for `sacct -pno JobID,TRESUsageInMax` (gres/gpumem=38888M,
# gres/gpuutil=100), its TRESUsageInAve-style raw bytes stand for the total; the
# AllocTRES with a typed GPU beside gres/gpu=1 is the one posted in
# neilmunday/slurm-mail#142 (sacct --fields JobID,AllocTRES -P).
GPU = """\
8117657|train|COMPLETED|5400|billing=64,cpu=9,gres/cpu=9,gres/gpu:a100_3g.20gb=1,gres/gpu=1,\
mem=60G,node=1|||
8117657.batch|batch|COMPLETED|5400|cpu=9,gres/cpu=9,gres/gpu:a100_3g.20gb=1,gres/gpu=1,mem=60G,\
node=1|10372780K|cpu=00:56:24,energy=0,fs/disk=350130624578,gres/gpumem=40777023488,\
gres/gpuutil=100,mem=10621726720,pages=3465,vmem=10439041024|cpu=00:56:24,energy=0,\
fs/disk=350130624578,gres/gpumem=38888M,gres/gpuutil=100,mem=10372780K,pages=3465,vmem=10194376K
8117657.extern|extern|COMPLETED|5400|billing=64,cpu=9,gres/gpu=1,mem=60G,node=1|256K|cpu=00:00:00,\
energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=262144,pages=0,vmem=0|cpu=00:00:00,\
energy=0,fs/disk=5273,gres/gpumem=0,gres/gpuutil=0,mem=256K,pages=0,vmem=0
8117678|eval|TIMEOUT|600|billing=192,cpu=16,gres/gpu:h100=2,mem=180G,node=1|||
8117678.batch|batch|CANCELLED by 0|601|cpu=16,gres/gpu:h100=2,mem=180G,node=1|2G|||
"""


def test_steps_fold_into_their_job_with_the_largest_maxrss():
    [job] = sacct.parse(LIVE)
    assert job == {"job_id": "1", "name": "alloc.sh", "state": "COMPLETED", "elapsed_s": 2,
                   "gpus": 0, "max_rss": 121741312, "max_rss_step": "1.batch", "steps": 1,
                   "gpu_tres_max": {}, "gpu_tres_tot": {}}
    [rounded] = sacct.parse(LIVE_CONVERTED)
    assert rounded["max_rss"] == 118888 * 1024  # K is KiB, as Slurm prints it


def test_gpu_jobs_count_gres_gpu_once_and_keep_gpu_tres_usage():
    train, evaluation = sacct.parse(GPU)
    assert train["gpus"] == 1  # gres/gpu=1, not + gres/gpu:a100_3g.20gb=1
    assert train["max_rss"] == 10372780 * 1024 and train["max_rss_step"] == "8117657.batch"
    assert train["gpu_tres_max"] == {"gpumem": 38888 * 2**20, "gpuutil": 100.0}
    assert train["gpu_tres_tot"] == {"gpumem": 40777023488, "gpuutil": 100.0}
    assert train["steps"] == 2
    assert evaluation["gpus"] == 2 and evaluation["state"] == "TIMEOUT"  # typed only: summed
    assert evaluation["max_rss"] == 2 * 2**30 and evaluation["gpu_tres_max"] == {}


@pytest.mark.parametrize("raw, expected", [
    ("121741312", 121741312), ("118888K", 118888 * 1024), ("38888M", 38888 * 2**20),
    ("1654.24K", round(1654.24 * 1024)), ("2G", 2 * 2**30), ("", None), ("n/a", None)])
def test_sizes_are_bytes(raw, expected):
    assert sacct.size(raw) == expected


def test_array_tasks_running_jobs_and_odd_lines():
    text = ("42_1|sweep|COMPLETED|10|cpu=1,gres/gpu=1,node=1|||\n"
            "42_1.batch|batch|COMPLETED|10|cpu=1,gres/gpu=1|1M|||\n"
            "42_2|sweep|RUNNING|3|cpu=1,gres/gpu=1,node=1|||\n"
            "7.0|orphan|COMPLETED|1|cpu=1|5M|||\n")  # a step whose job was not listed
    a, b = sacct.parse(text)
    assert (a["job_id"], a["max_rss"], b["state"], b["max_rss"]) == ("42_1", 2**20, "RUNNING",
                                                                      None)
    with pytest.raises(sacct.SacctError, match="fields"):
        sacct.parse("1|x|COMPLETED\n")


def test_the_command_takes_only_job_ids():
    assert sacct.command(["12", "13_4"])[-2:] == ["-j", "12,13_4"]
    for bad in (["12;rm"], [], ["1"] * 101, ["-1"]):
        with pytest.raises(ValueError):
            sacct.command(bad)


def test_sacct_failing_is_an_error_not_records():
    class Proc:
        returncode, stdout = 1, ""
        stderr = "sacct: error: Slurm accounting storage is disabled\n"
    assert sacct.query(["5"], run=lambda *a, **k: Proc()) == {
        "error": "sacct exited with 1: sacct: error: Slurm accounting storage is disabled"}
    assert "could not run" in sacct.query(["5"], run=_missing)["error"]


def _missing(*a, **k):
    raise FileNotFoundError("sacct")


def request(jobs, note=None):
    return {"plan": "repro", "block": "baseline", "jobs": jobs, "runs": None, "note": note,
            "user": "U1"}


def test_gpu_hours_are_elapsed_times_gpus_and_incomplete_jobs_are_retries():
    actual, text = slurmactual.outcome(request(["8117657", "8117678"], "first run"),
                                       {"records": sacct.parse(GPU)})
    assert actual["hours"] == pytest.approx((5400 * 1 + 600 * 2) / 3600)
    assert actual["parts"] == {"retries": pytest.approx(1200 / 3600)}
    assert actual["note"].startswith("Slurm accounting: jobs 8117657 COMPLETED 1:30:00 × 1 GPU, "
                                     "8117678 TIMEOUT 0:10:00 × 2 GPU; Elapsed 1:40:00 in all; "
                                     "MaxRSS max 9.89 GiB (8117657.batch); GPU TRES usage: "
                                     "gres/gpumem max 38 GiB, gres/gpuutil max 100%")
    assert actual["note"].endswith("; first run")
    assert "1.833 GPU-h actual (0.3333 of it in jobs that did not complete" in text


def test_cpu_only_jobs_are_node_hours_and_say_so():
    actual, text = slurmactual.outcome(request(["1"]), {"records": sacct.parse(LIVE)})
    assert actual["hours"] == pytest.approx(2 / 3600) and actual["parts"] == {}
    assert "node-h actual" in text and "counted as node-hours" in actual["note"]
    assert "MaxRSS max 116 MiB (1.batch)" in actual["note"]
    assert "GPU TRES usage not gathered" in actual["note"]


@pytest.mark.parametrize("jobs, result, says", [
    (["1", "99"], {"records": sacct.parse(LIVE)}, "sacct does not know job 99"),
    (["42"], {"records": [{"job_id": "42_2", "state": "RUNNING", "elapsed_s": 3, "gpus": 1}]},
     "job 42_2 (RUNNING) has not ended"),
    (["5"], {"error": "sacct exited with 1: accounting storage is disabled"},
     "could not read it: sacct exited with 1"),
    (["5"], {"records": [{"job_id": "5", "state": "CANCELLED", "elapsed_s": 0, "gpus": 1}]},
     "ran 0 GPU-seconds"),
])
def test_unknown_running_or_failing_records_nothing(jobs, result, says):
    actual, text = slurmactual.outcome(request(jobs), result)
    assert actual is None and says in text and "Nothing was recorded" in text


def test_an_array_job_id_takes_all_its_tasks():
    recs = [{"job_id": f"42_{i}", "state": "COMPLETED", "elapsed_s": 60, "gpus": 1}
            for i in (1, 2, 3)]
    actual, _ = slurmactual.outcome(request(["42"]), {"records": recs})
    assert actual["hours"] == pytest.approx(3 * 60 / 3600)


@pytest.mark.parametrize("text, says", [
    ("slurm=12 hours=2", "give hours=H or slurm=JOBID, not both"),
    ("slurm=12 retries=1", "`retries=` and `slurm=` together"),
    ("slurm=T12", "`T12` is not a Slurm job id"),
    ("slurm=12;13", "is not a Slurm job id"),
    ("slurm=12,12", "job 12 is given twice"),
    ("slurm=" + ",".join(str(i) for i in range(101)), "at most 100 job ids"),
    ("runs=3", "needs hours=H"),
])
def test_bad_slurm_actuals_are_refused(text, says):
    with pytest.raises(PlanError, match=says.replace("(", r"\(").replace(")", r"\)")):
        plancmd.parse_actual(["baseline", *text.split()])


def test_a_slurm_actual_parses_ids_and_array_tasks():
    assert plancmd.parse_actual(["verify", "slurm=12,13_4", "runs=3", "note=x"]) == {
        "block": "verify", "slurm": ["12", "13_4"], "hours": None, "parts": {}, "note": "x",
        "runs": 3}


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "s.db")), admins=frozenset({"U1"}))


def say(ctx, text, request=None):
    return commands.plan(ctx, text, "U1", "C1", TODAY, request=request)["text"]


def a_plan(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro")
    say(ctx, f"repro block baseline runs=10 trial={t}")


def requests(ctx):
    return ctx.store.db["slurm_actuals"].count


def test_without_a_slurm_worker_the_answer_says_how_to_start_one(ctx):
    a_plan(ctx)
    ctx.store.upsert_worker("gpu-box", {"gpus": []})  # a plain worker cannot run sacct
    out = say(ctx, "repro actual baseline slurm=12")
    assert "No Slurm worker is registered" in out and "--executor slurm" in out
    assert "Nothing was stored" in out and requests(ctx) == 0
    out = say(ctx, "repro actual verify slurm=12")
    assert "has no verify block" in out and requests(ctx) == 0


def test_a_slurm_worker_leases_the_request_and_its_answer_records_the_actual(ctx):
    a_plan(ctx)
    ctx.store.upsert_worker("hpc", {"executor": "slurm", "partition": "gpu"})
    ctx.store.upsert_worker("box", {"gpus": []})
    out = say(ctx, "repro actual baseline slurm=8117657,8117678 runs=10", request="trig-1")
    assert "Asked a Slurm worker (hpc online)" in out and "request A1" in out
    again = say(ctx, "repro actual baseline slurm=8117657,8117678 runs=10", request="trig-1")
    assert "Already received" in again and requests(ctx) == 1  # Slack's retry asks once
    assert ctx.queue.lease("box", 0) is None  # only a Slurm worker reads accounting
    job = ctx.queue.lease("hpc", 0)
    assert job["kind"] == "slurm-accounting" and job["jobs"] == ["8117657", "8117678"]
    api = WorkerApi(ctx, "tok")
    assert api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok",
                      {"worker": "hpc", "lease": job["lease"], "result": {"records": "x"}}
                      )[0] == 400
    assert api.handle("/api/accounting/9/result", "Bearer tok",
                      {"worker": "hpc", "lease": "l", "result": {"error": "x"}})[0] == 404
    assert api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok",
                      {"worker": "hpc", "lease": "other", "result": {"error": "x"}})[0] == 409
    assert ctx.store.db["actuals"].count == 0
    status, body = api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok",
                              {"worker": "hpc", "lease": job["lease"],
                               "result": {"records": sacct.parse(GPU)}})
    assert (status, body) == (200, {"request": "A1", "status": "done"})
    [actual] = ctx.store.actuals("repro")
    assert actual["slurm"] == ["8117657", "8117678"] and actual["runs"] == 10
    assert actual["hours"] == pytest.approx(6600 / 3600)
    posted = [m for m in ctx.store.unsent() if "Recorded for *repro* baseline" in m["text"]]
    assert len(posted) == 1 and posted[0]["channel"] == "C1"
    review = say(ctx, "repro review")
    assert "from Slurm accounting: jobs 8117657 COMPLETED" in review and "manual" not in review
    assert "more retries" in review
    assert "added actual baseline #1: hours=1.83333, slurm=8117657, 8117678" in say(
        ctx, "repro history")  # the Slurm worker's answer is a change too, by who asked
    assert api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok",
                      {"worker": "hpc", "lease": job["lease"], "result": {"error": "x"}}
                      )[0] == 409  # answered once; a late second answer changes nothing


def test_a_result_sent_again_records_one_actual_and_gets_the_first_answer(ctx):
    a_plan(ctx)
    ctx.store.upsert_worker("hpc", {"executor": "slurm"})
    say(ctx, "repro actual baseline slurm=8117657,8117678")
    job = ctx.queue.lease("hpc", 0)
    api = WorkerApi(ctx, "tok")
    body = {"worker": "hpc", "lease": job["lease"], "result": {"records": sacct.parse(GPU)},
            "key": "result-1"}
    first = api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok", body)
    assert first == (200, {"request": "A1", "status": "done"})
    assert api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok", body) == first
    assert len(ctx.store.actuals("repro")) == 1
    assert api.handle(f"/api/accounting/{job['id']}/result", "Bearer tok",
                      dict(body, key="result-2"))[0] == 409


def test_an_unknown_job_posts_why_and_records_nothing(ctx):
    a_plan(ctx)
    ctx.store.upsert_worker("hpc", {"executor": "slurm"})
    say(ctx, "repro actual baseline slurm=99")
    job = ctx.queue.lease("hpc", 0)
    req = service.answer_slurm(ctx, job["id"], "hpc", job["lease"], {"records": []})
    assert req["status"] == "failed" and req["actual"] is None
    assert ctx.store.actuals("repro") == []
    assert any("sacct does not know job 99" in m["text"] for m in ctx.store.unsent())


def test_a_silent_slurm_worker_loses_the_lease_and_the_request_fails_after_two(tmp_path):
    ctx = context(Store(str(tmp_path / "s.db")), JobQueue(Store(str(tmp_path / "s.db")),
                                                          lease_seconds=0.05))
    a_plan(ctx)
    ctx.store.upsert_worker("hpc", {"executor": "slurm"})
    say(ctx, "repro actual baseline slurm=5")
    first = ctx.queue.lease("hpc", 0)
    import time
    time.sleep(0.1)
    second = ctx.queue.lease("hpc", 0)  # expired: leased again, attempt 2
    assert second["id"] == first["id"] and second["lease"] != first["lease"]
    time.sleep(0.1)
    assert ctx.queue.lease("hpc", 0) is None  # the second expiry ends it
    req = ctx.store.slurm_actual(first["id"])
    assert req["status"] == "failed" and "stopped answering" in req["message"]
    assert any("stopped answering" in m["text"] for m in ctx.store.unsent())
    assert ctx.store.actuals("repro") == []
    result = json.loads(ctx.store.db.execute(
        "select result from slurm_actuals").fetchone()[0])
    assert "lease expired 2 times" in result["error"]


def test_a_slurm_request_is_stored_queued_then_running_then_ended_as_actual_statuses(ctx):
    # bot/states.py's ActualStatus names what a `slurm_actuals` row's status holds
    a_plan(ctx)
    ctx.store.upsert_worker("hpc", {"executor": "slurm"})
    say(ctx, "repro actual baseline slurm=5")
    [(req_id, queued)] = ctx.store.db.execute("select id, status from slurm_actuals").fetchall()
    job = ctx.queue.lease("hpc", 0)
    running = ctx.store.slurm_actual(req_id)["status"]
    ended = service.answer_slurm(ctx, req_id, "hpc", job["lease"], {"error": "no sacct"})
    assert [queued, running, ended["status"]] == [ActualStatus.QUEUED, ActualStatus.RUNNING,
                                                  ActualStatus.FAILED]
    assert "no sacct" in ended["message"]


def test_a_usage_figure_sacct_prints_as_nan_or_inf_is_not_recorded():
    # float() reads "nan" and "inf": sent on, the bot refuses the whole result (#29)
    for text in ("nan", "inf", "-inf", "NaN"):
        assert sacct.gpu_usage({"gres/gpuutil": text, "gres/gpumem": "1G"}) == {"gpumem": 2**30}
    assert sacct.gpu_usage({"gres/gpuutil": "87.5"}) == {"gpuutil": 87.5}
