"""Recipes: the admin's file, its refusals, and real runs of real programs."""
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import BIN, ROOT
from worker import attempts, launcher, recipes
from worker.spec import SpecError, parse

PROGRAMS = Path(__file__).parents[1] / "programs"


def write(tmp_path, body: str) -> str:
    path = tmp_path / "recipes.toml"
    path.write_text(textwrap.dedent(body))
    return str(path)


def echo_recipe(tmp_path, params='tag = { type = "string", default = "a" }'):
    return write(tmp_path, f"""
        [recipes.echo]
        cwd = "{PROGRAMS}"
        argv = ["{{python}}", "argv_echo.py", "--tag", "{{tag}}"]
        env = {{ ECHO_OUT = "{tmp_path / 'argv.json'}" }}
        timeout = "1m"

        [recipes.echo.params]
        {params}
        """)


def test_example_file_loads_with_its_params():
    r = recipes.load(str(ROOT / "examples" / "recipes.toml"))
    w = r["paper-infer"].workload()
    assert w.recipe and w.param("batch").high == 512 and w.param("timeout").default == 600
    assert r["paper-infer"].cwd == str(ROOT / "examples")


@pytest.mark.parametrize("body, line, says", [
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true"]
     colour = "red"
     """, 5, "unknown key `colour`"),
    ("""
     [recipes.x]
     cwd = "."
     argv = "true --now"
     """, 4, "non-empty list of strings"),
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true"]

     [recipes.x]
     cwd = "."
     """, 6, "x"),
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true", "{batch}"]
     """, 4, "`{batch}`"),
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true"]

     [recipes.x.params]
     batch = { type = "int", min = 1, max = 8, default = 9 }
     """, 7, "default of `batch`"),
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true"]

     [recipes.x.params]
     batch = { type = "integer", default = 1 }
     """, 7, "needs type"),
    ("""
     [recipes.x]
     cwd = "/nonexistent/trialbot"
     argv = ["true"]
     """, 3, "not a directory"),
    ("""
     [recipes.x]
     cwd = "."
     argv = ["true"]
     requires = "gpu"
     """, 5, "`requires`"),
])
def test_bad_recipe_files_name_the_line(tmp_path, body, line, says):
    path = write(tmp_path, body)
    with pytest.raises(recipes.RecipeError) as err:
        recipes.load(path)
    assert f"line {line}" in str(err.value) or f"{path}:{line}" in str(err.value)
    assert says in str(err.value)


def test_worker_refuses_to_start_on_a_bad_file(tmp_path):
    path = write(tmp_path, """
        [recipes.x]
        cwd = "."
        argv = ["true"]
        colour = "red"
        """)
    for args in (["--server", "http://127.0.0.1:9", "--token", "t", "--recipes", path],
                 ["--recipes", path, "trial", "recipe", "x"]):
        done = subprocess.run([str(BIN / "trialbot-worker"), *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and f"{path}:5" in done.stderr and "colour" in done.stderr


@pytest.mark.parametrize("word, says", [
    ("tag=a;rm", "must be text matching"),
    ("tag=-rf", "start with"),
    ("tag=$(id)", "must be text matching"),
    ("tag=../../etc/passwd", "not contain `..`"),
    ("tag=" + "a" * 300, "longer than 256"),
    ("size=2.5e9", "from 0.5 to 4.0"),
    ("size=nan", "from 0.5 to 4.0"),
    ("mode=turbo", "one of fast, exact"),
])
def test_parameters_outside_their_type_are_refused(tmp_path, word, says):
    path = echo_recipe(tmp_path, params='''tag = { type = "string", default = "a" }
        size = { type = "float", min = 0.5, max = 4.0, default = 1.0 }
        mode = { type = "choice", choices = ["fast", "exact"], default = "fast" }''')
    table = {k: r.workload() for k, r in recipes.load(path).items()}
    with pytest.raises(SpecError) as err:
        parse(["recipe", "echo", word], table)
    assert says in err.value.message and err.value.token == word


def test_only_recipes_in_the_file_run(tmp_path):
    table = {k: r.workload() for k, r in recipes.load(echo_recipe(tmp_path)).items()}
    with pytest.raises(SpecError) as err:
        parse(["recipe", "rm"], table)
    assert "only recipes in a worker's recipe file can run" in err.value.message
    assert "echo" in err.value.message


def test_values_are_whole_argv_elements_never_shell(tmp_path):
    path = echo_recipe(tmp_path, params='tag = { type = "string", pattern = "[a-z ]+", '
                                        'default = "a" }')
    book = recipes.load(path)
    spec = parse(["recipe", "echo", "tag=two words"], {"echo": book["echo"].workload()})
    r = launcher.run_trial(spec, recipes=book)
    assert r["status"] == "ok", r["error"]
    assert [p["name"] for p in r["phases"]] == ["launch", "weights", "run"]
    assert json.loads((tmp_path / "argv.json").read_text()) == ["--tag", "two words"]
    assert r["recipe"] == "echo" and len(r["env"]["code_commit"]) == 40


def test_the_example_paper_script_runs_with_phases_and_code_version():
    book = recipes.load(str(ROOT / "examples" / "recipes.toml"))
    spec = parse(["recipe", "paper-infer", "batch=2", "seq=64", "batches=2"],
                 {"paper-infer": book["paper-infer"].workload()})
    r = launcher.run_trial(spec, recipes=book)
    assert r["status"] == "ok", r["error"]
    assert [p["name"] for p in r["phases"]] == ["launch", "weights", "data", "run"]
    assert r["memory"]["host_rss_peak"] > 100 * 2**20
    assert len(r["env"]["code_commit"]) == 40 and r["env"]["code_dirty"] in (True, False)


def test_oom_retries_at_half_the_batch_and_says_so(tmp_path):
    path = write(tmp_path, f"""
        [recipes.fits]
        cwd = "{PROGRAMS}"
        argv = ["{{python}}", "argv_echo.py", "--batch", "{{batch}}", "--fits", "1"]

        [recipes.fits.params]
        batch = {{ type = "int", min = 1, max = 64, default = 4 }}
        """)
    book = recipes.load(path)
    spec = parse(["recipe", "fits", "batch=4", "on_oom=halve-batch"],
                 {"fits": book["fits"].workload()})
    r = attempts.run(spec, recipes=book)
    assert r["status"] == "ok"
    assert [(a["error_class"], a["changed"]) for a in r["attempts"]] == [
        ("oom", {}), ("oom", {"batch": 2}), (None, {"batch": 1})]
    assert r["params"]["batch"] == 1 and r["requested"]["batch"] == 4
    assert r["seconds_lost"] > 0


def test_halve_batch_needs_a_batch(tmp_path):
    table = {k: r.workload() for k, r in recipes.load(echo_recipe(tmp_path)).items()}
    with pytest.raises(SpecError) as err:
        parse(["recipe", "echo", "on_oom=halve-batch"], table)
    assert "no integer `batch`" in err.value.message


def test_the_probe_runs_a_shadowed_sitecustomize_once(tmp_path):
    # Once: the launcher's shim (which runs before the program) imports no site.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'a').write('yes\\n')\n")
    path = write(tmp_path, f"""
        [recipes.echo]
        cwd = "{PROGRAMS}"
        argv = ["{{python}}", "argv_echo.py"]
        env = {{ PYTHONPATH = "{theirs}" }}
        """)
    book = recipes.load(path)
    r = launcher.run_trial(parse(["recipe", "echo"], {"echo": book["echo"].workload()}),
                           recipes=book)
    assert r["status"] == "ok" and (tmp_path / "ran").read_text() == "yes\n"


def test_code_version_outside_git_says_so(tmp_path):
    from worker import codeversion
    v = codeversion.of(str(tmp_path))
    assert v["code_commit"] is None and "not a git checkout" in v["code_version"]


@pytest.mark.parametrize("body, says", [
    ("recipes = 5\n", "`recipes` must be tables"),
    ('[recipes.x]\ncwd = "."\nargv = ["true"]\nparams = 5\n', "`params` of `x`"),
    ('[recipes.x]\ncwd = "."\nargv = ["true"]\n[recipes.x.params]\n'
     'tag = { type = "string", default = "a", max_length = "abc" }\n', "`max_length`"),
    ('[recipes.x]\ncwd = "."\nargv = ["python", "-c", "print(\'{\')"]\n', "literal brace"),
    ('[recipes.x]\ncwd = "."\nargv = ["true"]\n[recipes.x.params]\n'
     'python = { type = "string", default = "a" }\n', "not `python`"),
])
def test_odd_recipe_files_are_refused_not_crashed(tmp_path, body, says):
    with pytest.raises(recipes.RecipeError) as err:
        recipes.load(write(tmp_path, body))
    assert says in str(err.value)


def test_the_worker_rechecks_values_against_its_own_file(tmp_path):
    from worker.spec import TrialSpec
    book = recipes.load(echo_recipe(tmp_path))
    forged = TrialSpec("recipe", {"tag": "/etc/hostname", "timeout": 60, "on_oom": "fail",
                                  "attempts": 1}, "echo")  # as if a bot had let it through
    r = launcher.run_trial(forged, recipes=book)
    assert r["error"]["class"] == "unsupported" and "tag=/etc/hostname" in r["error"]["message"]
    assert not (tmp_path / "argv.json").exists()


def test_a_request_cannot_raise_the_recipes_timeout(tmp_path):
    table = {k: r.workload() for k, r in recipes.load(echo_recipe(tmp_path)).items()}
    with pytest.raises(SpecError) as err:
        parse(["recipe", "echo", "timeout=604800"], table)
    assert "from 1 to 60" in err.value.message


def test_the_trial_never_sees_the_workers_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIALBOT_WORKER_TOKEN", "sekrit")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-sekrit")
    program = tmp_path / "env.py"
    program.write_text("import os, json\njson.dump(dict(os.environ), "
                       f"open({str(tmp_path / 'env.json')!r}, 'w'))\n")
    book = recipes.load(write(tmp_path, f"""
        [recipes.env]
        cwd = "{tmp_path}"
        argv = ["{{python}}", "env.py"]
        """))
    r = launcher.run_trial(parse(["recipe", "env"], {"env": book["env"].workload()}),
                           recipes=book)
    assert r["status"] == "ok"
    seen = json.loads((tmp_path / "env.json").read_text())
    assert not [k for k in seen if k.startswith(("TRIALBOT_WORKER", "SLACK_"))]


def test_what_a_recipe_leaves_running_is_killed_with_it(tmp_path):
    program = tmp_path / "bg.py"
    program.write_text("import subprocess\n"
                       f"p = subprocess.Popen(['sleep', '300'])\n"
                       f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid))\n")
    book = recipes.load(write(tmp_path, f"""
        [recipes.bg]
        cwd = "{tmp_path}"
        argv = ["{{python}}", "bg.py"]
        """))
    r = launcher.run_trial(parse(["recipe", "bg"], {"bg": book["bg"].workload()}), recipes=book)
    assert r["status"] == "ok" and r["seconds"] < 5
    pid = int((tmp_path / "pid").read_text())
    import os
    import time
    time.sleep(0.2)
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split()[2] == "Z"  # at most a zombie awaiting its reaper
    except ProcessLookupError:
        pass


def faketorch_trial(tmp_path, name: str, program: str) -> dict:
    """`program` from tests/programs run as recipe `name` over the fake torch."""
    book = recipes.load(write(tmp_path, f"""
        [recipes.{name}]
        cwd = "{PROGRAMS}"
        argv = ["{{python}}", "{program}"]
        env = {{ PYTHONPATH = "{PROGRAMS / 'faketorch'}" }}
        """))
    r = launcher.run_trial(parse(["recipe", name], {name: book[name].workload()}),
                           recipes=book)
    assert r["status"] == "ok", r["error"]
    return r


def test_probe_records_each_phases_allocator_peak_even_with_repeated_names(tmp_path):
    r = faketorch_trial(tmp_path, "probe", "probe_phases.py")
    assert [(p["name"], p.get("peak_allocated")) for p in r["phases"]] == [
        ("launch", 0), ("batch", 100), ("batch", 5000), ("batch", 300)]
    assert r["phases"][-1]["allocated"] == 10
    m = r["memory"]
    assert m["peak_allocated"] == 5000 and m["num_ooms"] == 0
    assert "injected probe" in m["method"]["peak_allocated"]
    assert r["env"]["gpu_name"] == "Fake GPU"


def test_hook_phases_reset_the_allocator_peaks_and_the_run_ends_at_its_last_unit(tmp_path):
    r = faketorch_trial(tmp_path, "hooked", "probe_hooked.py")
    assert [(p["name"], p["found_by"], p["peak_allocated"]) for p in r["phases"]] == [
        ("launch", "start", 0), ("weights", "hook:from_pretrained", 1000),
        ("warmup", "hook:generate", 3000), ("run", "hook:generate", 4000)]
    assert r["memory"]["peak_allocated"] == 9000  # the whole process's, after the run too
    assert r["latency"]["count"] == 3
    assert r["phases"][-1]["end"] == r["windows"]["rows"][-1]["end"]  # the last unit's end
