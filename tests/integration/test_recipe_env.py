"""A recipe's own environment: a paper-like repository the test writes, pinned
to a transformers 4.x, built by the worker with uv from the package registry,
run with the worker's torch, then reused; the refusals of what cannot be
built; failures named for what they are (docs/recipes.md#its-own-environment).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BIN
from worker import launcher, recipes
from worker.spec import parse

TRANSFORMERS_4 = "4.40.2"  # a 4.x with wheels for this Python (tokenizers 0.19)
OLD_FILELOCK = "3.12.0"

PAPER = """
import argparse, os, tempfile, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=4)
args = ap.parse_args()
tmp = tempfile.mkdtemp()
config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
LlamaForCausalLM(config).save_pretrained(tmp)
model = LlamaForCausalLM.from_pretrained(tmp)
ids = torch.randint(0, 64, (1, 4))
start = time.perf_counter()
for _ in range(3):
    model.generate(ids, max_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
import accelerate, filelock, transformers
print("transformers", transformers.__version__, "filelock", filelock.__version__,
      "own timer", time.perf_counter() - start)
print("torch from", torch.__file__)
"""


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def paper_repo(tmp_path, files: dict) -> tuple[str, str]:
    repo = tmp_path / "paper"
    repo.mkdir()
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(textwrap.dedent(text))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "paper")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return str(repo), head


def recipe_file(tmp_path, body: str) -> str:
    path = tmp_path / "recipes.toml"
    path.write_text(textwrap.dedent(body))
    return str(path)


def repo_recipe(tmp_path, repo: str, commit: str, requirement: str, extra: str = "") -> str:
    """Recipe `x`: `run.py` of `repo` at `commit`, in its own environment."""
    return recipe_file(tmp_path, f'[recipes.x]\nrepo = "{repo}"\ncommit = "{commit}"\n'
                                 f'requirements = ["{requirement}"]\n{extra}\n'
                                 'argv = ["{python}", "run.py"]\ntimeout = "5m"\n')


def paper_fixture(tmp_path) -> tuple[str, str, str]:
    """The paper-like repository and its recipe file: (recipe file, repo, commit)."""
    repo, head = paper_repo(tmp_path, {
        # filelock: a package the worker's torch needs, pinned to another version
        # accelerate: a package that itself requires torch
        "requirements.txt": f"torch==2.0.1\ntransformers=={TRANSFORMERS_4}\n"
                            f"filelock=={OLD_FILELOCK}\naccelerate==0.23.0\n",
        "infer.py": PAPER})
    path = recipe_file(tmp_path, f"""
        [recipes.paper]
        repo = "{repo}"
        commit = "{head[:10]}"
        requirements = ["requirements.txt"]
        argv = ["{{python}}", "infer.py", "--tokens", "{{tokens}}"]
        timeout = "10m"
        [recipes.paper.params]
        tokens = {{ type = "int", min = 1, max = 16, default = 4 }}
        """)
    return path, repo, head


def worker_trial(path: str, cache, *words) -> dict:
    out = subprocess.run([str(BIN / "trialbot-worker"), "--recipes", path, "trial", "recipe",
                          *words, "--json"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRIALBOT_ENV_CACHE": str(cache)})
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return json.loads(out.stdout)


def setup_phase(r: dict) -> dict:
    return next(p for p in r["phases"] if p["found_by"] == "recipe-environment")


def test_a_paper_pinned_to_transformers_4_runs_in_its_built_environment_then_reuses_it(
        tmp_path):
    import filelock
    import torch
    worker_filelock = filelock.__version__
    path, repo, head = paper_fixture(tmp_path)
    cache = tmp_path / "cache"
    first = worker_trial(path, cache, "paper")
    assert first["status"] == "ok", first.get("error")
    env, setup = first["env"], setup_phase(first)
    assert setup["name"] == "setup" and setup["cached"] is False
    built = env["environment"]
    assert built["packages"]["transformers"] == TRANSFORMERS_4
    assert built["torch"] == torch.__version__  # the worker's, never the pinned 2.0.1
    assert built["packages"]["torch"] == torch.__version__  # not one from the index
    assert "/trialbot-worker-torch/torch/__init__.py" in first["output_tail"]
    assert built["torch_pins_not_used"] == ["torch==2.0.1"]
    # What the program ran: the pins, and the worker's own copies untouched.
    assert f"transformers {TRANSFORMERS_4} filelock {OLD_FILELOCK}" in first["output_tail"]
    assert subprocess.run([sys.executable, "-c", "import filelock; print(filelock.__version__)"],
                          capture_output=True, text=True).stdout.strip() == worker_filelock
    assert env["recipe_repo"] == repo and env["recipe_commit"] == head
    assert env["code_dirty"] is False and env["recipe_cwd"].startswith(str(cache))
    # The probe's hooks work in transformers 4.x: phases and units found.
    names = [p["name"] for p in first["phases"]]
    assert names[:2] == ["setup", "launch"] and "weights" in names and names[-1] == "run"
    assert first["units"]["kinds"] == {"generate": 3}
    second = worker_trial(path, cache, "paper", "tokens=2")
    again = setup_phase(second)
    assert second["status"] == "ok" and again["cached"] is True and again["seconds"] < 1
    assert again["built_at"] == second["env"]["environment"]["built_at"]
    assert again["build_seconds"] == pytest.approx(built["build_seconds"])
    from worker import summary
    line = summary.environment_line(second)
    assert line.startswith("reused, built ") and "torch==2.0.1" in line


def test_a_plan_counts_a_reused_environments_build_once_as_prep():
    from bot.plans import estimate
    r = {"seconds": 30.0, "phases": [
        {"name": "setup", "seconds": 0.05, "found_by": "recipe-environment", "cached": True,
         "built_at": 1.0, "build_seconds": 20.0},
        {"name": "run", "seconds": 9.0}]}
    assert estimate.prep_seconds(r) == pytest.approx(20.0 + 30.0 - 9.05)


@pytest.mark.parametrize("keys, says", [
    ('commit = "abc1234"', "`commit` needs `repo`"),
    ('repo = "{repo}"', "`repo` needs `commit`"),
    ('repo = "{repo}"\ncommit = "0123456789abcdef"', "commit `0123456789abcdef` is not in repo"),
    ('repo = "{plain}"\ncommit = "abc"', "is not a git repository"),
    ('repo = "{repo}"\ncommit = "{head}"\nrequirements = ["reqs/missing.txt"]',
     "requirements file `reqs/missing.txt` does not exist at commit"),
    ('repo = "{repo}"\ncommit = "{head}"\nrequirements = ["."]', "no setup.py or pyproject"),
    ('requirements = ["../outside.txt"]', "must be a path inside the repository"),
    ('packages = ["-e ."]', "is not a requirement like"),
    ('packages = "six"', "must be a list of strings"),
    ('python = "3.99"', "python 3.99 is not installed on this worker"),
    ('python = "three"', "is not a version like"),
    ('torch = "cuda"', '`torch` in recipe `x` must be "worker"'),
])
def test_an_environment_that_cannot_be_made_is_refused_at_start(tmp_path, keys, says):
    repo, head = paper_repo(tmp_path, {"run.py": "print(1)\n"})
    (tmp_path / "plain").mkdir()
    body = keys.format(repo=repo, head=head, plain=tmp_path / "plain")
    path = recipe_file(tmp_path, """
        [recipes.x]
        cwd = "."
        argv = ["{python}", "run.py"]
        """ + textwrap.indent(body, " " * 8))
    with pytest.raises(recipes.RecipeError) as err:
        recipes.load(path, env_cache=str(tmp_path / "cache"))
    assert says in str(err.value) and str(err.value).startswith(path + ":")


def test_a_repository_installed_by_dot_is_importable_and_its_tree_stays_clean(tmp_path):
    repo, head = paper_repo(tmp_path, {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n'
                          'build-backend = "setuptools.build_meta"\n'
                          '[project]\nname = "ownpkg"\nversion = "0.1"\n'
                          '[tool.setuptools]\npackages = ["ownpkg"]\n',
        "ownpkg/__init__.py": "X = 41\n",
        "scripts/run.py": "import ownpkg\nprint('own', ownpkg.X + 1)\n"})
    path = repo_recipe(tmp_path, repo, head, ".", 'cwd = "scripts"')
    r = run_recipe(path, tmp_path / "cache")
    assert r["status"] == "ok", r.get("error")
    assert "own 42" in r["output_tail"] and r["env"]["recipe_cwd"].endswith("/scripts")
    assert r["env"]["environment"]["packages"]["ownpkg"] == "0.1 (editable)"
    assert r["env"]["code_dirty"] is False  # the build's egg-info is not the code's change


def run_recipe(path: str, cache, name: str = "x") -> dict:
    book = recipes.load(path, env_cache=str(cache))
    return launcher.run_trial(parse(["recipe", name], {name: book[name].workload()}),
                              recipes=book)


def test_what_can_only_be_known_at_trial_time_is_an_environment_error(tmp_path):
    repo, head = paper_repo(tmp_path, {"run.py": "print(1)\n"})
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", repo, str(bare)], check=True)
    cases = {
        f'repo = "file://{tmp_path}/nowhere.git"\ncommit = "{head}"':
            "could not be fetched",
        f'repo = "file://{bare}"\ncommit = "0123456789ab"':
            "commit `0123456789ab` is not in repo",
        f'repo = "file://{bare}"\ncommit = "{head}"\nrequirements = ["requirements.txt"]':
            "requirements file `requirements.txt` does not exist",
        # Resolved against the registry: a distribution no index has.
        'packages = ["trialbot-no-such-distribution-7f3a==1.0"]':
            "could not be installed",
    }
    for keys, says in cases.items():
        path = recipe_file(tmp_path, '[recipes.x]\ncwd = "."\nargv = ["{python}", "run.py"]\n'
                           + keys + "\n")
        r = run_recipe(path, tmp_path / "cache")
        assert r["status"] == "failed", keys
        assert r["error"]["class"] == "environment" and r["error"]["phase"] == "setup", r["error"]
        assert says in r["error"]["message"], r["error"]["message"]
        assert "Traceback" not in r["error"]["message"]
    assert "trialbot-no-such-distribution-7f3a" in r["error"]["message"]  # the resolver's line


def test_failures_are_named_for_what_they_are(tmp_path):
    """Import errors before the first unit and a library of another version are
    `environment` errors in the phase they happened in, not crashes "in run"."""
    repo, _ = paper_repo(tmp_path, {
        "requirements.txt": "transformers==4.33.2\n",
        "ownpkg/__init__.py": "X = 1\n",
        "own.py": "import sys\nsys.path.pop(0)\nimport ownpkg\n",
        "missing.py": "import trialbot_absent_module\n",
        "old_api.py": "from transformers.generation.utils import GreedySearchOutput\n",
        "fine.py": "raise SystemExit(3)\n"})
    body = "".join(f'[recipes.{n}]\ncwd = "{repo}"\nargv = ["{{python}}", "{n}.py"]\n'
                   for n in ("own", "missing", "old_api", "fine"))
    path = recipe_file(tmp_path, body.replace("old_api]", "old-api]"))
    own = run_recipe(path, tmp_path / "cache", "own")
    assert own["error"]["class"] == "environment" and own["error"]["phase"] == "launch"
    assert "`ownpkg` is this repository's own package" in own["error"]["message"]
    assert [p["name"] for p in own["phases"]] == ["launch"]
    missing = run_recipe(path, tmp_path / "cache", "missing")
    assert "runs in the worker's own environment" in missing["error"]["message"]
    old = run_recipe(path, tmp_path / "cache", "old-api")
    import transformers
    assert old["error"]["class"] == "environment", old["error"]
    assert (f"transformers {transformers.__version__} is installed; the repository declares "
            "transformers==4.33.2") in old["error"]["message"]
    fine = run_recipe(path, tmp_path / "cache", "fine")
    assert fine["error"]["class"] == "crash"  # the program's own exit stays its own


def test_a_library_error_under_an_overridden_torch_pin_names_the_pin(tmp_path):
    """LookaheadDecoding pins torch<2.1.1; under the worker's torch its call into
    transformers fails. transformers is at the declared version: the pin the
    worker overrode is the likely cause, and the error says so."""
    import torch
    repo, head = paper_repo(tmp_path, {
        "requirements.txt": f"torch<2.1.1\ntransformers=={TRANSFORMERS_4}\n",
        "run.py": "import torch, transformers\ntransformers.LlamaConfig.from_dict(1)\n"})
    path = repo_recipe(tmp_path, repo, head, "requirements.txt")
    r = run_recipe(path, tmp_path / "cache")
    assert r["error"]["class"] == "environment", r["error"]
    assert (f"the repository pins torch<2.1.1; this worker's torch {torch.__version__} ran it"
            in r["error"]["message"])
    assert r["env"]["environment"]["torch_pins_not_used"] == ["torch<2.1.1"]


@pytest.mark.parametrize("version, pin, met", [
    ("2.13.0+cu126", "torch>=1.13", True), ("2.1.1", "torch<2.1.1", False),
    ("2.13.0+cpu", "torch==2.13.0", True), ("2.13.0", "torch", True),
    ("2.13.0", "torch==2.0.1", False), ("2.13.0", "torch @ https://x/y.whl", True),
])
def test_a_pin_is_met_as_pip_reads_it(version, pin, met):
    from worker import environment
    assert environment.meets(version, pin) is met
    assert environment.other_torch([pin], version) == ([] if met else [pin])


def test_torch_without_an_environment_of_its_own_is_refused(tmp_path):
    path = recipe_file(tmp_path, '[recipes.x]\ncwd = "."\nargv = ["true"]\ntorch = "recipe"\n')
    with pytest.raises(recipes.RecipeError, match="declares none"):
        recipes.load(path, env_cache=str(tmp_path / "cache"))


def test_a_trial_user_cannot_run_a_recipe_environment_yet(tmp_path):
    from worker.launcher import envbuild
    path = recipe_file(tmp_path, '[recipes.x]\ncwd = "."\nargv = ["true"]\n'
                                 'packages = ["six"]\n')
    book = recipes.load(path, env_cache=str(tmp_path / "cache"))
    made = envbuild.make(book["x"], 1e12, None, user=object())
    assert made.failure == envbuild.TRIAL_USER and made.run is None
    assert not (tmp_path / "cache").exists()  # nothing built, nothing owned


def test_a_trial_waiting_on_anothers_build_stops_at_its_timeout(tmp_path):
    import fcntl
    import threading
    import time as clock

    from worker.launcher import envbuild
    path = recipe_file(tmp_path, '[recipes.x]\ncwd = "."\nargv = ["true"]\n'
                                 'packages = ["six"]\n')
    book = recipes.load(path, env_cache=str(tmp_path / "cache"))
    (tmp_path / "cache" / "envs").mkdir(parents=True)
    made = envbuild.make(book["x"], clock.monotonic() + 60, threading.Event())  # the key's dir
    assert made.failure is None, made.failure
    lock = next((tmp_path / "cache" / "envs").glob("*.lock"))
    import shutil
    shutil.rmtree(str(lock)[:-5])  # not built: the next trial must build, and wait
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        made = envbuild.make(book["x"], clock.monotonic() + 0.5, threading.Event())
    assert made.stopped == "timeout" and "another trial was building" in made.failure


def test_the_worker_refuses_to_start_with_trial_user_and_a_recipe_environment(tmp_path):
    path = recipe_file(tmp_path, '[recipes.own]\ncwd = "."\nargv = ["true"]\n'
                                 'packages = ["six"]\n')
    done = subprocess.run([str(BIN / "trialbot-worker"), "--server", "http://127.0.0.1:9",
                           "--token", "t", "--trial-user", "nobody", "--recipes", path],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TRIALBOT_ENV_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2, done.stderr
    assert "recipe own has its own repository or environment" in done.stderr
    assert "Traceback" not in done.stderr
