"""The store and queue on a real SQLite file: leases, expiry, late workers."""
import threading
import time

import pytest

from bot.app.runtime import context
from bot.store import Store
from bot.trials import workers
from bot.trials.queue import LeaseLost
from worker import report as reports
from worker.spec import parse


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "q.db")))


def ok_report():
    r = reports.new_report("llm-infer", {})
    r["status"] = "ok"
    return r


def submit(ctx, words="llm-infer"):
    return ctx.queue.submit(parse(words.split()), words, "U1", "C1")


def test_job_survives_a_new_store_on_the_same_file(tmp_path):
    q = context(Store(str(tmp_path / "q.db")))
    job = submit(q)
    again = Store(str(tmp_path / "q.db"))
    assert again.job(job["id"])["status"] == "queued"
    assert again.db.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_two_racing_workers_get_one_job_once(ctx):
    submit(ctx)
    got = []
    threads = [threading.Thread(target=lambda n=n: got.append(ctx.queue.lease(f"w{n}", 0)))
               for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    leased = [j for j in got if j]
    assert len(leased) == 1 and leased[0]["attempts"] == 1


def test_long_poll_returns_when_a_job_arrives(ctx):
    threading.Timer(0.3, lambda: submit(ctx)).start()
    t0 = time.monotonic()
    job = ctx.queue.lease("w1", 10)
    assert job and time.monotonic() - t0 < 3


def test_lease_is_answered_empty_after_wait(ctx):
    t0 = time.monotonic()
    assert ctx.queue.lease("w1", 0.3) is None
    assert time.monotonic() - t0 >= 0.3


def test_expired_lease_requeues_and_late_worker_cannot_report(ctx):
    submit(ctx)
    ctx.queue.lease_seconds = 0.2
    first = ctx.queue.lease("w1", 0)
    time.sleep(0.3)
    second = ctx.queue.lease("w2", 0)
    assert second["id"] == first["id"] and second["attempts"] == 2
    with pytest.raises(LeaseLost):
        ctx.queue.heartbeat(first["id"], "w1", first["lease"])
    with pytest.raises(LeaseLost):
        ctx.queue.finish(first["id"], "w1", first["lease"], ok_report())
    done = ctx.queue.finish(second["id"], "w2", second["lease"], ok_report())
    assert done["status"] == "done" and done["report"]["worker"] == "w2"


def test_a_lease_its_worker_never_got_edits_the_card_back_to_queued(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    assert ctx.queue.unsent("w1", job["id"], leased["lease"])
    assert not ctx.queue.unsent("w1", job["id"], leased["lease"])  # once: it is queued now
    card_id, edit = ctx.store.unsent()[0]["id"], ctx.store.unsent()[1]
    assert edit["update_of"] == card_id and "queued again" in edit["text"]
    assert "*w1* hung up" in edit["text"] and "started on" not in edit["text"]
    assert edit["blocks"][1]["elements"][0]["action_id"] == "trial_cancel"
    again = ctx.queue.lease("w2", 0)
    assert again["attempts"] == 1
    last = ctx.store.unsent()[-1]
    assert last["update_of"] == card_id and "started on *w2*" in last["text"]


def test_cancelling_a_requeued_trial_ends_its_card_too(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    ctx.queue.unsent("w1", job["id"], leased["lease"])
    assert "will not run" in ctx.queue.cancel(job["id"], "U9")
    card_id = ctx.store.unsent()[0]["id"]
    ended = [m for m in ctx.store.unsent() if m["update_of"] == card_id][-1]
    assert "cancelled by <@U9>" in ended["text"] and "blocks" in ended
    actions = [e["action_id"] for b in ended["blocks"] if b["type"] == "actions"
               for e in b["elements"]]
    assert "trial_cancel" not in actions and "trial_rerun" in actions


def test_cancelling_a_trial_that_never_started_posts_no_card_edit(ctx):
    job = submit(ctx)
    ctx.queue.cancel(job["id"], "U9")
    assert not [m for m in ctx.store.unsent() if m["update_of"]]


def test_finish_queues_report_threaded_under_started(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    r = reports.fail(reports.new_report("llm-infer", {}), "oom", "CUDA out of memory", "run")
    ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    rows = ctx.store.unsent()
    assert [m["kind"] for m in rows] == ["started", "summary", "report"]
    assert rows[1]["update_of"] == rows[0]["id"] and rows[2]["thread_of"] == rows[0]["id"]
    assert "FAILED (oom" in rows[1]["text"] and "Details in the thread" in rows[1]["text"]
    assert ctx.store.job(job["id"])["error_class"] == "oom"


def test_a_job_whose_workers_keep_dying_fails_with_the_reason(ctx):
    job = submit(ctx)
    ctx.queue.lease_seconds = 0.1
    ctx.queue.lease("w1", 0)
    time.sleep(0.15)
    ctx.queue.lease("w2", 0)  # second and last lease
    time.sleep(0.15)
    assert ctx.queue.lease("w3", 0) is None
    failed = ctx.store.job(job["id"])
    assert failed["status"] == "failed" and failed["error_class"] == "killed"
    assert "lease expired 2 times" in failed["report"]["error"]["message"]
    lost = ctx.store.attempts(job["id"])
    assert [a["error_class"] for a in lost] == ["killed", "killed"]
    assert [m["kind"] for m in ctx.store.unsent()][-1] == "report"


def test_idle_seconds_add_up_per_worker_and_day(ctx):
    ctx.store.add_idle("w1", {"2026-11-30": 10.5})
    ctx.store.add_idle("w1", {"2026-11-30": 4.5, "2026-12-01": 1})
    assert [(r["day"], r["seconds"]) for r in ctx.store.idle("w1")] == [
        ("2026-11-30", 15.0), ("2026-12-01", 1.0)]


def test_recipes_go_only_to_workers_that_can_run_them(ctx):
    from worker.spec import Workload
    recipe = {"name": "adkv", "summary": "", "requires": "cuda", "params": []}
    ctx.store.upsert_worker("mac", {"gpus": [], "recipes": [recipe]})
    ctx.store.upsert_worker("plain", {"gpus": ["NVIDIA H100"]})
    ctx.store.upsert_worker("h100", {"gpus": ["NVIDIA H100"], "recipes": [recipe]})
    spec = parse(["recipe", "adkv"], {"adkv": Workload.from_dict(recipe)})
    job = ctx.queue.submit(spec, "recipe adkv", "U1", "C1")
    assert workers.online_for(ctx.store.workers(), job["spec"]) == ["h100"]
    assert ctx.queue.lease("mac", 0) is None and ctx.queue.lease("plain", 0) is None
    assert ctx.queue.lease("h100", 0)["id"] == job["id"]


def test_an_older_database_file_is_brought_up_to_the_schema(tmp_path):
    import sqlite3
    path = str(tmp_path / "old.db")
    old = sqlite3.connect(path)
    old.execute("create table outbox (id integer primary key, channel text, text text, "
                "blocks text, created float, sent float, ts text)")
    old.execute("insert into outbox (channel, text, blocks) values ('C1', 'kept', '[]')")
    old.commit()
    old.close()
    store = Store(path)
    assert {"file", "given_up", "thread_of"} <= set(store.db["outbox"].columns_dict)
    assert [m["text"] for m in store.unsent()] == ["kept"]


def test_status_and_list_do_not_load_the_timeline(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    r = ok_report()
    r["timeline"] = {"sampled": {"columns": ["t", "host_rss"], "rows": [[1.0, 5]] * 2000}}
    ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    assert "timeline" not in ctx.store.job(job["id"])["report"]
    assert len(ctx.store.report_with_timeline(job["id"])["timeline"]["sampled"]["rows"]) == 2000


def test_training_ranks_go_only_to_a_worker_with_a_gpu_or_core_per_rank():
    from bot.trials.workers import can_run
    spec = {"workload": "llm-train", "params": {"world": 2, "device": "cuda"}}
    assert not can_run({"gpus": ["H100"]}, spec)
    assert can_run({"gpus": ["H100", "H100"]}, spec)
    cpu = {"workload": "llm-train", "params": {"world": 4, "device": "auto"}}
    assert not can_run({"gpus": [], "cpus": 2}, cpu) and can_run({"cpus": 8}, cpu)
    assert can_run({}, cpu)  # a worker that did not say: it decides itself


@pytest.mark.parametrize("how", ["release", "unsent"])
def test_a_cancel_that_lands_as_the_trial_is_handed_back_ends_it(ctx, monkeypatch, how):
    """The user clicks Cancel between the queue reading the job and handing it
    back (a stopping worker's release, or a lease its worker never got): the
    trial ends cancelled. Before, it was queued with its cancel asked, which no
    second cancel could end, and ran on the next worker."""
    ctx.store.upsert_worker("w1", {})
    job = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    leased = ctx.queue.lease("w1", 0)
    read = ctx.store.job
    clicked = []

    def read_then_click(job_id):
        out = read(job_id)
        if not clicked:  # the queue has read the job: now the click lands
            clicked.append(None)
            monkeypatch.setattr(ctx.store, "job", read)
            clicked[0] = ctx.queue.cancel(job_id, "U1")
        return out

    monkeypatch.setattr(ctx.store, "job", read_then_click)
    if how == "release":
        ctx.queue.release(job["id"], "w1", leased["lease"], "SIGTERM")
    else:
        ctx.queue.unsent("w1", job["id"], leased["lease"])
    monkeypatch.undo()
    assert "kills it at its next heartbeat" in clicked[0]
    after = ctx.store.job(job["id"])
    assert after["status"] == "cancelled" and after["report"]["error"]["class"] == "cancelled"
    assert ctx.queue.lease("w1", 0) is None
