"""`trialbot console` as a user runs it: a real process reading a script."""
import json
import subprocess
import sys

import pytest

from conftest import BIN, ROOT


def run_console(tmp_path, lines, *flags):
    return subprocess.run([str(BIN / "trialbot"), "console", "--db", str(tmp_path / "c.db"),
                           *flags], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, cwd=ROOT, timeout=240)


def test_console_json_prints_the_slack_payloads_in_order(tmp_path):
    done = run_console(tmp_path, ["/trial llm-infer batch=2 gen=4 repeats=2 stability=0 "
                                  "processes=1", "/trial llm-infer batch=0", "/trial list"],
                       "--json")
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    updates = [o for o in out if o.get("update")]  # the card edited in place
    queued, started, report, chart, bad, listing = [o for o in out if not o.get("update")]
    assert updates and "T1 llm-infer ok" in updates[-1]["text"]
    assert queued["response_type"] == "ephemeral" and "Queued as *T1*" in queued["text"]
    assert started["channel"] == "console" and "started on" in started["text"]
    assert report["thread_ts"] and "phases: setup" in report["text"]
    assert "host RSS peak" in report["text"]
    assert {"channel", "thread_ts", "text", "blocks"} <= set(report)
    assert chart["file"].endswith("T1-memory.png") and chart["thread_ts"] == report["thread_ts"]
    assert chart["file"] == str(tmp_path / "trialbot-files" / "T1-memory.png")  # beside the db
    with open(chart["file"], "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert "`batch=0`" in bad["text"]
    assert "T1* done" in listing["text"]


def test_console_text_and_unknown_command(tmp_path):
    done = run_console(tmp_path, ["/trial help", "/deploy prod", "/plan new x", "/trial workers"])
    assert done.returncode == 0, done.stderr
    assert "llm-infer" in done.stdout and "`/deploy` is not a command" in done.stdout
    assert "Plan *x* started" in done.stdout
    # the local worker registers its machine like trialbot-worker: cores, not "?"
    assert "-local* —" in done.stdout and "? CPU cores" not in done.stdout


def test_jobs_left_queued_or_held_run_at_next_start(tmp_path):
    from bot.store import Store
    from worker.spec import parse
    spec = parse(["llm-infer", "gen=2", "repeats=1", "stability=0", "processes=1"])
    store = Store(str(tmp_path / "c.db"))
    store.add_job(spec.to_dict(), "llm-infer gen=2 repeats=1", "U1", "console")
    # held by `trialbot serve` for Slack's word on its channel: the console has no Slack
    store.add_jobs([spec.to_dict()], ["llm-infer gen=2 repeats=1"], "U2", "console", held=True)
    done = run_console(tmp_path, ["/trial llm-infer gen=2 repeats=1 stability=0 processes=1"])
    assert done.returncode == 0, done.stderr
    # jobs run in order: the stored T1 and T2 report before the new T3
    assert done.stdout.index("T1 llm-infer ok") < done.stdout.index("T2 llm-infer ok") \
        < done.stdout.index("T3 llm-infer ok")


def test_unusable_database_is_one_clear_line(tmp_path):
    done = subprocess.run([str(BIN / "trialbot"), "console", "--db",
                           str(tmp_path / "missing" / "x.db")], input="", capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert "cannot use the database" in done.stderr and "Traceback" not in done.stderr


def test_a_plan_from_a_real_trial_to_its_review(tmp_path):
    small = "llm-infer gen=2 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 stability=0"
    done = run_console(tmp_path, [
        f"/trial {small} repeats=4", "/plan new repro gpu=cpu",
        "/plan repro block baseline runs=8 trial=T1",
        f"/trial {small} repeats=8 plan=repro block=baseline",
        f"/trial {small} plan=repro block=verify",
        "/plan repro review", "/plan repro show"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "baseline block added" in out and "8 runs × " in out
    assert "actual of plan *repro*, baseline block" in out
    assert "plan repro has no such block" in out and "Queued as *T3*" not in out
    assert "*baseline*: estimated" in out and "from T2" in out and "8 runs done, 8 planned" in out
    assert "T2 (baseline): done" in out


def console_transport(out):
    from bot.app.console import ConsoleTransport
    return ConsoleTransport(out, False)


def test_a_later_message_in_a_terminal_gets_its_own_line_and_the_prompt_again():
    import os
    import pty
    master, child = pty.openpty()
    with os.fdopen(child, "w") as out:
        transport = console_transport(out)
        transport.prompt()
        transport.send({"channel": "console", "text": "T1 report"})
        transport.answered()  # the user pressed Enter: the next message is no interruption
        transport.send({"channel": "console", "text": "reply"})
        # the terminal turns \n into \r\n
        want = "> \r\x1b[K[#console]\r\nT1 report\r\n> [#console]\r\nreply\r\n"
        seen = _read_pty(master, len(want.encode()))
    os.close(master)
    assert seen == want


def test_the_console_prompt_is_redrawn_under_a_report_that_arrives_while_it_waits():
    import os
    import pty

    from bot.app import console
    master, child = pty.openpty()
    with os.fdopen(child, "w") as out:
        transport = console_transport(out)

        class Typing:  # the report arrives while the user is still typing
            def readline(self):
                transport.send({"channel": "console", "text": "T1 report"})
                return "/trial list\n"
        lines = console._lines(Typing(), transport, interactive=True)
        assert next(lines) == "/trial list" and not transport.prompting
        want = "> \r\x1b[K[#console]\r\nT1 report\r\n> "
        seen = _read_pty(master, len(want.encode()))
    os.close(master)
    assert seen == want


def _read_pty(fd: int, size: int, timeout: float = 10.0) -> str:
    """What the terminal shows, `size` bytes of it: the kernel hands a pty's output
    to its reader in pieces, later under load, so one read may see only a part."""
    import os
    import select
    import time
    got, deadline = b"", time.monotonic() + timeout
    while len(got) < size and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            got += os.read(fd, 4096)
    return got.decode()


def test_outside_a_terminal_messages_print_as_before():
    import io
    out = io.StringIO()
    transport = console_transport(out)
    transport.prompt()
    transport.send({"channel": "console", "text": "T1 report", "thread_ts": "console.1"})
    assert out.getvalue() == "> [#console]\n    T1 report\n"


def test_the_console_prints_what_the_blocks_add_to_the_text():
    from bot.app.console import render
    from bot.blocks import context, section
    from bot.digest import build
    digest = build.message("console", "*Digest* of the week")
    assert render(digest["text"], digest["blocks"]) == (
        "*Digest* of the week\nGPU-hours are measured wall time × GPUs; the chart (GPU-hours "
        "by component per day, planned vs actual per block) is in the thread.")
    blocks = [{"type": "header", "text": {"type": "plain_text", "text": "Plan repro"}},
              section(":white_check_mark: *T1* ok"),
              {"type": "section", "fields": [{"type": "mrkdwn", "text": "*Peak*\n236 MiB"},
                                             {"type": "mrkdwn", "text": "*Seen*\n3 times"}]},
              {"type": "divider"}, context("_from T1_")]
    # the text's own lines are not printed twice; each missing line once
    assert render("T1 ok\npeak: 236 MiB", blocks) == (
        "T1 ok\npeak: 236 MiB\nPlan repro\n*Seen*\n3 times\n_from T1_")
    assert render("plain", None) == "plain"


def test_the_consoles_worker_runs_trials_as_the_trial_user(tmp_path):
    """`--trial-user USER`, as trialbot-worker has it: the embedded worker's
    trials run as USER. Here `nobody` may not run this venv's Python, which the
    console warns of at start and the trial's report names: the switch happened."""
    import os
    import pwd

    import pytest
    if os.geteuid() != 0:
        done = run_console(tmp_path, ["/trial help"], "--trial-user", "nobody")
        assert done.returncode == 2 and "only a worker running as root" in done.stderr
        return
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody` on this machine")
    from conftest import python_for_nobody
    done = run_console(tmp_path, ["/trial llm-infer gen=1 repeats=1 stability=0 malloc=glibc "
                                  "processes=1"], "--trial-user", "nobody")
    assert done.returncode == 0, done.stderr
    if python_for_nobody() == sys.executable:  # nobody may run this venv's Python
        assert "T1 llm-infer ok" in done.stdout, done.stdout
    else:
        assert "cannot run the worker's Python" in done.stderr, done.stderr
        assert "as user nobody: Permission denied" in done.stdout, done.stdout
    for flags, says in [(("--trial-user", "root"), "is root (uid 0)"),
                        (("--trial-user", "no-such-user-x"), "no such user")]:
        refused = run_console(tmp_path, ["/trial help"], *flags)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr


def test_serve_takes_trial_user_only_with_its_local_worker(tmp_path):
    done = subprocess.run([str(BIN / "trialbot"), "serve", "--trial-user", "nobody"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--trial-user is for the trials of --local-worker" \
        in done.stderr, done.stderr


RECIPE_PROGRAM = """
print("TRIALBOT_PHASE prep", flush=True)
print("TRIALBOT_PHASE run", flush=True)
held = bytearray(b"x") * (64 << 20)
"""
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 500, "tie_word_embeddings": False}


def test_the_console_runs_a_recipe_and_an_hf_model_from_its_own_files(tmp_path):
    """Its worker offers what trialbot-worker --recipes --models would: the recipe
    file's recipes, and the configs in --models built by transformers (found as a
    worker finds it, not "has no transformers")."""
    pytest.importorskip("transformers")
    (tmp_path / "prog.py").write_text(RECIPE_PROGRAM)
    (tmp_path / "recipes.toml").write_text(
        f'[recipes.hold]\ncwd = "{tmp_path}"\nargv = ["{{python}}", "prog.py"]\n'
        'timeout = "1m"\n')
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text(json.dumps(TINY_LLAMA))
    done = run_console(tmp_path, [
        "/trial workers", "/trial recipe hold",
        "/trial hf-infer model=tiny prompt=8 gen=4 repeats=2 stability=0 warmup=1 "
        "malloc=glibc device=cpu processes=1"],
        "--recipes", str(tmp_path / "recipes.toml"), "--models", str(tmp_path / "models"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "transformers " in out and "models `tiny`" in out and "has no transformers" not in out
    assert "T1 recipe hold ok" in out and "phases: launch" in out
    assert "run " in out and "(host RSS peak " in out  # per phase, from the sampled timeline
    assert "T2 hf-infer ok" in out and "config from " + str(tmp_path / "models") in out


def test_a_bad_recipe_file_or_models_directory_stops_the_console_by_name(tmp_path):
    bad = tmp_path / "recipes.toml"
    bad.write_text('[recipes.x]\ncwd = "."\nargv = ["true"]\ncolour = "red"\n')
    done = run_console(tmp_path, ["/trial list"], "--recipes", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"trialbot console: refusing to start: {bad}:4" in done.stderr
    assert "colour" in done.stderr and done.stdout == ""
    done = run_console(tmp_path, ["/trial list"], "--models", str(tmp_path / "nope"))
    assert done.returncode == 2 and "is not a directory" in done.stderr
    done = subprocess.run([str(BIN / "trialbot"), "serve", "--recipes", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--recipes is for the trials of --local-worker" in done.stderr


def test_a_console_command_that_fails_unexpectedly_is_answered_with_an_error_id(
        tmp_path, monkeypatch, caplog):
    """In-process: a line whose handler raises gets the error id, and the next line runs."""
    import io
    import re

    from bot.app import console
    from bot.plans import views as plan_views
    monkeypatch.setattr(plan_views, "plan_list", lambda *args: 1 / 0)
    out = io.StringIO()
    lines = io.StringIO("/plan list\n/plan new x\n")
    assert console.run(str(tmp_path / "c.db"), False, lines, out) == 0
    error_id = re.search(r"Something went wrong \(error id ([0-9a-f]{8})\)\. Tell whoever "
                         r"runs the bot, with this id\.", out.getvalue())[1]
    assert "Plan *x* started" in out.getvalue() and "Traceback" not in out.getvalue()
    [record] = [r for r in caplog.records if error_id in r.getMessage()]
    assert record.levelname == "ERROR" and "ZeroDivisionError" in caplog.text
