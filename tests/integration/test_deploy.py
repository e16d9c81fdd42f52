"""The deploy paths (docs/deploy.md) hold together without building an image:
torch's range keeps a box's CUDA build, the worker's install has no Slack code,
the Dockerfiles run the commands the docs give, compose mounts the database
where the bot's settings put it, and a worker reaches an https:// bot only
with a certificate it can verify (a real TLS server on loopback, a
certificate made by openssl for the test)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEPLOY = ROOT / "docs" / "deploy.md"
WORKER_IMAGE = ROOT / "docker" / "worker.Dockerfile"
BOT_IMAGE = ROOT / "docker" / "bot.Dockerfile"
# Babel is the worker's too: its console speaks TRIALBOT_LANG (docs/i18n.md)
SLACK_SIDE = {"slack-bolt", "slack-sdk", "sqlite-utils", "apscheduler", "matplotlib", "scipy",
              "prometheus-client"}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def base_requirements() -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in project()["dependencies"]]
    return {r.name.lower(): r for r in reqs}


@pytest.mark.parametrize("version", ["2.13.0+cu128", "2.9.1+cu128", "2.3.0+cu121",
                                     "2.13.0+cpu", "2.6.0"])
def test_a_cuda_build_of_torch_satisfies_the_range_so_pip_keeps_it(version):
    assert base_requirements()["torch"].specifier.contains(version)


@pytest.mark.parametrize("version", ["2.2.2+cu121", "3.0.0"])
def test_the_range_still_refuses_a_torch_the_worker_was_not_written_for(version):
    assert not base_requirements()["torch"].specifier.contains(version)


def test_the_installed_torch_satisfies_the_range():
    import importlib.metadata
    assert base_requirements()["torch"].specifier.contains(importlib.metadata.version("torch"))


def test_the_workers_install_pulls_no_slack_code():
    assert not set(base_requirements()) & SLACK_SIDE
    bot_extra = {Requirement(r).name.lower() for r in project()["optional-dependencies"]["bot"]}
    assert {"slack-bolt", "slack-sdk"} <= bot_extra  # where they are instead


# --- the Dockerfiles against the docs ------------------------------------------------------

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documented(path: Path) -> list[str]:
    """Every line inside a fenced block of `path`, its `  # comment` dropped and
    whitespace squeezed."""
    return [" ".join(line.split(" # ")[0].split()) for block in FENCE.findall(path.read_text())
            for line in block.splitlines() if line.strip()]


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def run_commands(dockerfile: Path) -> list[str]:
    """The RUN instructions' commands, one per `&&`, without the image-only
    `--no-cache-dir` (it keeps pip's cache out of a layer)."""
    return [" ".join(cmd.replace("--no-cache-dir ", "").split())
            for word, rest in instructions(dockerfile) if word == "RUN"
            for cmd in rest.split("&&")]


def test_the_worker_image_installs_with_the_documented_commands():
    installs = [c for c in run_commands(WORKER_IMAGE) if c.startswith(("python -c", "pip "))]
    assert len(installs) == 2  # the constraint from the image's torch, then the worker
    for doc in (DEPLOY, ROOT / "README.md"):
        lines = documented(doc)
        for command in installs:
            assert command in lines, f"{doc.name} does not give `{command}`"


def test_the_worker_image_is_an_official_pytorch_cuda_runtime_with_the_worker_as_entrypoint():
    steps = instructions(WORKER_IMAGE)
    base = next(rest for word, rest in steps if word == "FROM")
    assert re.fullmatch(r"pytorch/pytorch:\d+\.\d+\.\d+-cuda[\d.]+-cudnn\d+-runtime", base)
    image_torch = base.split(":")[1].split("-")[0]  # the build the constraint then pins
    assert base_requirements()["torch"].specifier.contains(image_torch)
    assert base in DEPLOY.read_text()
    assert ("ENTRYPOINT", '["trialbot-worker"]') in steps
    assert "trialbot-worker" in project()["scripts"]


def test_the_bot_image_installs_with_the_documented_commands():
    installs = [c for c in run_commands(BOT_IMAGE) if c.startswith("pip ")]
    assert installs and all(c in documented(DEPLOY) for c in installs)
    assert ("CMD", '["trialbot", "serve"]') in instructions(BOT_IMAGE)


@pytest.mark.parametrize("dockerfile", [WORKER_IMAGE, BOT_IMAGE], ids=lambda p: p.name)
def test_an_image_stops_with_the_sigterm_its_program_handles(dockerfile):
    assert ("STOPSIGNAL", "SIGTERM") in instructions(dockerfile)
    assert "STOPSIGNAL SIGTERM" in DEPLOY.read_text()


def test_the_workers_stop_fits_inside_docker_stops_10_s_as_documented():
    from worker.signals import GRACE, TELL
    assert GRACE + TELL < 10  # docker stop's default, before its SIGKILL
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert f"`TRIALBOT_STOP_GRACE`),\n{GRACE:g} s by default" in operations
    assert f"has {GRACE:g} s (`--stop-grace`)" in DEPLOY.read_text()


@pytest.mark.parametrize("dockerfile", [WORKER_IMAGE, BOT_IMAGE], ids=lambda p: p.name)
def test_what_an_image_copies_is_in_the_repository(dockerfile):
    copies = [rest.split() for word, rest in instructions(dockerfile) if word == "COPY"]
    assert copies
    for *sources, _dest in copies:
        for src in sources:
            assert (ROOT / src).exists(), f"{dockerfile.name} copies {src}, which is not here"
    if dockerfile == WORKER_IMAGE:  # the docs promise it: no bot, so no Slack code
        assert not any(s.startswith("bot") for *sources, _ in copies for s in sources)


def test_documented_docker_commands_name_real_files_images_and_worker_options():
    lines = documented(DEPLOY) + documented(ROOT / "README.md")
    builds = [shlex.split(line) for line in lines if line.startswith("docker build")]
    assert builds
    tags = set()
    for words in builds:
        assert (ROOT / words[words.index("-f") + 1]).is_file()
        tags.add(words[words.index("-t") + 1])
    runs = [shlex.split(line) for line in lines if line.startswith("docker run")]
    assert runs
    help_text = subprocess.run([BIN / "trialbot-worker", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    for words in runs:
        image = next(w for w in words if w in tags)  # an image built above
        args = words[words.index(image) + 1:]
        if args[:1] == ["trial"]:
            continue  # the same words as /trial, checked by the spec's own tests
        for option in (a for a in args if a.startswith("--")):
            assert f" {option} " in help_text, f"trialbot-worker has no {option}"


# --- compose: the database on the volume --------------------------------------------------


def compose_bot() -> dict:
    return yaml.safe_load((ROOT / "compose.yml").read_text())["services"]["bot"]


def env_example() -> dict[str, str]:
    lines = (ROOT / "docker" / "bot.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_compose_keeps_the_database_the_settings_open_on_its_named_volume():
    from bot.app import config
    bot = compose_bot()
    env = dict(env_example(), TRIALBOT_WORKER_TOKEN="t", **bot["environment"])
    settings = config.from_env(env)  # the variable the bot really reads
    mounts = dict(v.split(":", 1) for v in bot["volumes"])
    named = yaml.safe_load((ROOT / "compose.yml").read_text())["volumes"]
    assert any(settings.db.startswith(target.rstrip("/") + "/") and name in named
               for name, target in mounts.items())
    image_db = next(rest for word, rest in instructions(BOT_IMAGE) if word == "ENV")
    assert image_db == f"TRIALBOT_DB={settings.db}"
    published = [p.split(":")[-1] for p in bot["ports"]]
    assert str(settings.port) in published


def test_compose_builds_the_bot_image_and_reads_a_documented_env_file():
    bot = compose_bot()
    assert (ROOT / bot["build"]["context"] / bot["build"]["dockerfile"]).resolve() == BOT_IMAGE
    assert bot["env_file"] == ".env" and ".env" in (ROOT / ".gitignore").read_text().split()
    assert "cp docker/bot.env.example .env" in documented(DEPLOY)
    operations = (ROOT / "docs" / "operations.md").read_text()
    for name in env_example():
        assert f"| `{name}` |" in operations, f"{name} is not in operations.md's settings"


# --- https:// and certificates ------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (its own CA), and an unrelated CA."""
    if not shutil.which("openssl"):
        pytest.skip("needs the openssl command to make a certificate")
    where = tmp_path_factory.mktemp("certs")
    for name, subject in (("bot", "127.0.0.1"), ("other", "someone-else")):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", f"/CN={subject}", "-addext", f"subjectAltName=IP:{subject}"
                        if name == "bot" else "subjectAltName=DNS:someone-else",
                        "-keyout", where / f"{name}.key", "-out", where / f"{name}.pem"],
                       check=True, capture_output=True, timeout=60)
    return where


@pytest.fixture
def https_bot(tmp_path, fake_slack, certs):
    """The real bot HTTP server (worker API included), its socket wrapped in TLS."""
    from bot.access import Policy
    from bot.app.runtime import Runtime
    from bot.slack.app import web_client
    from bot.slack.transport import SlackTransport
    rt = Runtime(str(tmp_path / "tls.db"), "wtoken",
                 SlackTransport(web_client("xoxb-test", fake_slack.api_url)),
                 policy=Policy())
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certs / "bot.pem", certs / "bot.key")
    rt.server.socket = tls.wrap_socket(rt.server.socket, server_side=True)
    rt.start()
    rt.url = rt.server.url.replace("http://", "https://")
    yield rt
    rt.stop()


def test_a_worker_refuses_an_https_bot_it_cannot_verify_and_names_the_fix(https_bot):
    from worker.client import CertError, Client
    with pytest.raises(CertError) as exc:
        Client(https_bot.url, "wtoken").register("w1", {})
    assert "could not be verified" in str(exc.value) and "--ca-file" in str(exc.value)
    assert https_bot.ctx.store.workers() == []


def test_a_worker_with_the_bots_ca_registers_over_https(https_bot, certs):
    from worker.client import Client
    reply = Client(https_bot.url, "wtoken", str(certs / "bot.pem")).register("w1", {})
    assert reply["worker"] == "w1"
    assert [w["name"] for w in https_bot.ctx.store.workers()] == ["w1"]


def test_the_wrong_ca_is_refused_naming_the_file(https_bot, certs):
    from worker.client import CertError, Client
    with pytest.raises(CertError) as exc:
        Client(https_bot.url, "wtoken", str(certs / "other.pem")).register("w1", {})
    assert f"not trusted by --ca-file {certs / 'other.pem'}" in str(exc.value)


def test_ssl_cert_file_is_honoured_without_ca_file(https_bot, certs, monkeypatch):
    from worker.client import Client
    monkeypatch.setenv("SSL_CERT_FILE", str(certs / "bot.pem"))
    assert Client(https_bot.url, "wtoken").register("w1", {})["worker"] == "w1"


def test_the_worker_command_stops_with_the_message_not_a_traceback(https_bot):
    done = subprocess.run([BIN / "trialbot-worker", "--server", https_bot.url, "--name", "w1"],
                          env=dict({k: v for k, v in os.environ.items()
                                    if k not in ("SSL_CERT_FILE", "TRIALBOT_CA_FILE")},
                                   TRIALBOT_WORKER_TOKEN="wtoken"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "could not be verified" in done.stderr and "--ca-file FILE" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("server", ["bot.example:3000", "ftp://bot.example", "https://",
                                    "localhost"])
def test_a_server_that_is_not_an_http_url_is_refused_with_the_form_to_write(server, capsys):
    from worker import cli
    assert not cli._server_ok(server, None)
    said = capsys.readouterr().err
    assert repr(server) in said and "https://HOST or http://HOST:PORT" in said


def test_a_ca_file_that_is_not_a_ca_bundle_is_refused(tmp_path, capsys):
    from worker import cli
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    for path in (junk, tmp_path / "missing.pem"):
        assert not cli._server_ok("https://bot.example", str(path))
        assert f"--ca-file {path} is not a readable CA bundle" in capsys.readouterr().err


def test_a_ca_file_with_plain_http_is_only_warned_about(certs, capsys):
    from worker import cli
    assert cli._server_ok("http://localhost:3000", str(certs / "bot.pem"))
    assert "warning: --ca-file is used only with an https:// server" in capsys.readouterr().err
    assert cli._server_ok("https://bot.example", str(certs / "bot.pem"))
