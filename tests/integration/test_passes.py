"""malloc=auto on a CPU: host RSS from a live memory pass, time from a glibc
time pass, each a real child process; explicit malloc= stays one pass."""
from bot.fits import batchview, scaling
from bot.trials import command as trial_command
from worker import launcher, machine, summary
from worker import report as reports
from worker.launcher import passes
from worker.spec import parse

SMALL = dict(batch=2, prompt=16, gen=4, repeats=3, stability=0, warmup=1, hidden=64, heads=2,
             kv_heads=1, vocab=512, device="cpu", processes=1)
MiB = 2**20


def small(**over):
    return parse(["llm-infer"] + [f"{k}={v}" for k, v in {**SMALL, **over}.items()])


def spy_env(monkeypatch) -> list:
    """The MALLOC_MMAP_THRESHOLD_ each child was started with, in order."""
    seen, real = [], launcher.builtin_env

    def env(spec):
        e = real(spec)
        seen.append(e.get("MALLOC_MMAP_THRESHOLD_"))
        return e
    monkeypatch.setattr(launcher, "builtin_env", env)
    return seen


def test_an_auto_cpu_trial_takes_host_rss_from_a_live_pass_and_time_from_glibc(monkeypatch):
    seen = spy_env(monkeypatch)
    r = launcher.run_trial(small())
    assert r["status"] == "ok", r["error"]
    assert seen == ["65536", None]  # the memory pass pinned the threshold, the time pass not
    memory, timing = r["passes"]
    assert (memory["pass"], memory["malloc"], memory["status"]) == ("memory", "live", "ok")
    assert (timing["pass"], timing["malloc"], timing["status"]) == ("time", "glibc", "ok")
    assert r["memory"]["host_rss_peak"] == memory["host_rss_peak"] > 50 * MiB
    assert "host_rss_peak" in memory["supplied"]
    method = r["memory"]["method"]["host_rss_peak"]
    assert "memory pass under malloc=live" in method and "time pass under glibc" in method
    # Time is the trial as asked (3 requests after a warmup), not the memory pass's 2.
    assert r["latency"]["count"] == 3 and [p["name"] for p in r["phases"]][-2:] == \
        ["warmup", "run"]
    assert r["seconds"] == timing["seconds"] and memory["seconds"] > 0
    assert r["params"]["malloc"] == "auto" and r["params"]["repeats"] == 3
    assert "time pass" in r["timeline"]["sampled"]["method"]
    assert "memory pass under malloc=live; times from a glibc pass" in summary.text(r)
    assert "timed under malloc=live" not in summary.text(r)
    assert reports.validate(r) == []


def test_explicit_malloc_keeps_one_pass(monkeypatch):
    seen = spy_env(monkeypatch)
    for malloc, threshold in (("glibc", None), ("live", "65536")):
        r = launcher.run_trial(small(malloc=malloc, repeats=1, warmup=0))
        assert r["status"] == "ok", r["error"]
        assert "passes" not in r and r["params"]["malloc"] == malloc
        assert seen.pop() == threshold and not seen
    assert "memory pass" not in r["memory"]["method"]["host_rss_peak"]
    # The kernel's figure is reported when it is the child's own (pytest may be larger):
    # then it is the peak (the child ran alone), and the card says so.
    kernel = r["memory"]["host_rss_peak_kernel"]
    assert kernel is None or r["memory"]["host_rss_peak"] == kernel
    assert ("it ran alone, malloc=live)" if kernel else "sampled ~100 Hz, malloc=live;") in \
        summary.text(r)
    # Its times are live's: the card says so, as a plan block resting on it does.
    assert "timed under malloc=live: its times include page faults" in summary.text(r)


def test_a_failed_memory_pass_is_a_clear_report_and_the_time_pass_is_skipped():
    r = launcher.run_trial(parse(["llm-infer", "vocab=1048576", "hidden=65536", "heads=64",
                                  "kv_heads=8", "device=cpu"]))
    assert r["status"] == "failed" and r["error"]["class"] == "oom"  # halve-batch still works
    assert r["error"]["message"].startswith("the memory pass (malloc=live")
    assert [(p["pass"], p["status"]) for p in r["passes"]] == [("memory", "failed"),
                                                                ("time", "not run")]
    assert r["params"]["malloc"] == "auto" and reports.validate(r) == []


def test_auto_on_cuda_is_one_glibc_pass(monkeypatch):
    seen = spy_env(monkeypatch)
    monkeypatch.setattr(machine, "has_cuda", lambda: True)
    spec = small(device="auto", repeats=1, warmup=0)
    assert passes.applies(spec) and not passes.split(spec)
    r = launcher.run_trial(spec)  # torch here has no CUDA: the child runs on the CPU
    assert r["status"] == "ok", r["error"]
    assert seen == [None] and [p["pass"] for p in r["passes"]] == ["one"]
    assert "malloc=auto on CUDA: one pass" in r["memory"]["method"]["host_rss_peak"]


def sweep_report(trial, batch, rss, seconds, split=True):
    p = small(batch=batch).params
    r = reports.new_report("llm-infer", p)
    r.update(trial=trial, worker="w1", status="ok", env={"device": "cpu", "gpu_count": 0})
    r["memory"]["host_rss_peak"] = rss
    r["latency"] = {"mean": seconds, "p50": seconds, "p90": seconds, "count": 3}
    if split:
        r["passes"] = [{"pass": "memory", "malloc": "live", "status": "ok", "seconds": 2.0,
                        "supplied": ["host_rss_peak", "host_rss_peak_kernel"]},
                       {"pass": "time", "malloc": "glibc", "status": "ok", "seconds": 3.0,
                        "supplied": ["phases"]}]
    else:
        r["params"]["malloc"] = "glibc"
    return r


def fit_text(rs):
    fit = scaling.fit_sweep(rs)
    jobs = [{"trial": r["trial"], "status": "done"} for r in rs]
    return fit, "\n".join(batchview.fit_parts(1, jobs, fit))


def test_the_fit_says_which_allocator_setting_each_figure_came_from():
    rs = [sweep_report(f"T{b}", b, 300 * MiB + b * 20 * MiB, 0.1 * b) for b in (1, 2, 4)]
    fit, text = fit_text(rs)
    assert fit["allocators"]["host_rss_peak"] == ["malloc=live, memory pass"]
    assert fit["allocators"]["time"] == ["malloc=glibc, time pass"]
    assert "Measured under malloc=live, memory pass: glibc's mmap threshold pinned" in text
    assert "Measured under malloc=glibc, time pass._" in text
    assert "overstate" not in text
    old = [sweep_report(f"T{b}", b, 300 * MiB + b * 20 * MiB, 0.1 * b, split=False)
           for b in (1, 2, 4)]
    fit, text = fit_text(old)
    assert fit["allocators"]["host_rss_peak"] == ["malloc=glibc"]
    assert "Measured under malloc=glibc: host RSS also counts memory" in text
    answer = "\n".join(batchview.answer_parts(1, [{"trial": "T1", "status": "done"}], fit,
                                              {"batch": 16}))
    assert "• host_rss_peak:" in answer and "_(from malloc=glibc)_" in answer
    live = old
    for r in live:
        r["params"]["malloc"] = "live"
    fit, text = fit_text(live)
    assert ("Measured under malloc=live: on a CPU its times include page faults from glibc's "
            "mmap threshold") in text and "malloc=auto times a separate glibc pass" in text


def test_a_long_memory_pass_error_keeps_its_first_words_and_its_cause():
    def run_one(spec, cancel, **kw):  # a memory pass that ended with a long traceback
        r = reports.new_report(spec.workload, spec.params)
        return reports.fail(r, "crash", "x" * 3000 + "RuntimeError: the cause", "run")
    r = passes.run(small(), run_one, None)
    assert r["error"]["message"].startswith("the memory pass (malloc=live")
    assert r["error"]["message"].endswith("RuntimeError: the cause")
    assert len(r["error"]["message"]) <= 2000


def test_the_heartbeat_says_memory_pass_and_then_the_time_passs_phases():
    seen = []

    def run_one(spec, cancel, progress=None, **kw):
        seen.append((spec.params["malloc"], dict(progress)))
        progress["phase"] = "run"  # what the child's marks would set
        r = reports.new_report(spec.workload, spec.params)
        r.update(status="ok", seconds=1.0)
        return r
    progress = {}
    passes.run(small(), run_one, None, progress=progress)
    assert seen[0][0] == "live" and seen[1] == ("glibc", {"phase": "memory pass"})


def test_a_default_depth_sweep_fits_live_host_rss_and_glibc_time(monkeypatch):
    from bot.fits import depth
    seen = spy_env(monkeypatch)
    shape = {**SMALL, "repeats": 2, "hidden": 256, "heads": 4, "kv_heads": 2}  # 4 MiB a layer
    words = " ".join(f"{k}={v}" for k, v in shape.items())
    cmd = trial_command.parse_trial(f"sweep llm-infer {words} layers=1,8")
    rs = [dict(launcher.run_trial(s), trial=f"T{i}") for i, s in enumerate(cmd.specs)]
    assert all(r["status"] == "ok" for r in rs), [r["error"] for r in rs]
    assert seen == ["65536", None] * 2  # each depth: a live memory pass, a glibc time pass
    for r in rs:
        memory, timing = r["passes"]
        assert r["memory"]["host_rss_peak"] == memory["host_rss_peak"]
        assert r["memory"]["host_rss_peak_kernel"] is None or \
            "memory pass under malloc=live" in r["memory"]["method"]["host_rss_peak_kernel"]
        assert timing["malloc"] == "glibc" and r["seconds"] == timing["seconds"]
    fit = depth.fit_depth(rs)
    assert fit["error"] is None
    assert fit["allocators"]["host_rss_peak"] == ["malloc=live, memory pass"]
    assert fit["allocators"]["time"] == ["malloc=glibc, time pass"]
    assert not any("page faults" in n for n in fit["notes"])
    # Seven more layers of weights (28 MiB by arithmetic) are in the live peak.
    per_layer = depth.layer_bytes(rs[0]["params"])["total"]
    assert 0.5 * per_layer < depth.slope(fit["memory"]["host_rss_peak"]) < 2 * per_layer
    assert [p["seconds"] for p in fit["points"]] == [r["latency"]["mean"] for r in rs]
