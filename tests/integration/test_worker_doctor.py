"""`trialbot-worker doctor` against a real bot on loopback: the real command as
a child process for each failure class this machine can show (no GPU, wrong
token, bot down, bad recipes), and the cheaper checks in-process."""
import io
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from conftest import BIN, ROOT, free_port
from worker import doctor
from worker import doctor_checks as checks

GOOD = """\
[recipes.echo]
cwd = "."
argv = ["{python}", "-c", "print({n})"]

[recipes.echo.params]
n = { type = "int", min = 1, max = 9, default = 1 }

[recipes.gpu-only]
cwd = "."
argv = ["{python}", "-c", "pass"]
requires = "cuda"
"""


@pytest.fixture
def rt(tmp_path):
    rt = Runtime(str(tmp_path / "doctor.db"), "wtoken",
                 ConsoleTransport(io.StringIO(), True, str(tmp_path)))
    rt.start()
    yield rt
    rt.stop()


def run_doctor(*args, token="wtoken"):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRIALBOT_SERVER", "TRIALBOT_WORKER_TOKEN")}
    env["TRIALBOT_WORKER_TOKEN"] = token
    return subprocess.run([str(BIN / "trialbot-worker"), "doctor", "--name", "gpu-x", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)


def line(out: str, status: str, what: str) -> str:
    found = [x for x in out.splitlines() if re.match(rf"{status}\s+{what}\s", x)]
    assert found, f"no `{status} {what}` line in:\n{out}"
    return found[0]


def no_gpu_here() -> bool:
    return checks.gpu_lines()[0].status == "fail"


needs_no_gpu = pytest.mark.skipif(not no_gpu_here(), reason="this box has a GPU")


@needs_no_gpu
def test_all_good_but_no_gpu_exits_1_and_changes_nothing_on_the_bot(rt, tmp_path):
    recipes = tmp_path / "recipes.toml"
    recipes.write_text(GOOD)
    done = run_doctor("--server", rt.server.url, "--recipes", str(recipes),
                      "--workdir", str(tmp_path))
    out = done.stdout
    assert done.returncode == checks.GPU, out + done.stderr
    assert "No GPU" in line(out, "FAIL", "gpu") and "install the NVIDIA driver" in out
    assert f"The bot at {rt.server.url} answers" in line(out, "ok", "bot")
    assert "the shared token" in line(out, "ok", "token")
    clock = line(out, "ok", "clock")
    offset = float(re.search(r"clock is ([+-][\d.]+) s", clock).group(1))
    assert abs(offset) < 1 and "Leases last 60 s after a heartbeat, sent every 10 s" in clock
    assert "its recipes: 2" in line(out, "ok", "recipes")
    assert "Recipe `echo`: `{python}` found" in out
    assert "Recipe `gpu-only` requires CUDA" in line(out, "warn", "recipes")
    assert f"in {tmp_path}." in line(out, "ok", "disk")
    assert "Failed checks: 2; exit code 1 (docs/doctor.md)." in out  # torch and gpu
    assert rt.store.workers() == []  # asked, never registered


@needs_no_gpu
def test_wrong_token_is_its_own_class_with_the_fix(rt):
    done = run_doctor("--server", rt.server.url, token="wrong")
    assert done.returncode == checks.GPU | checks.TOKEN, done.stdout
    token = line(done.stdout, "FAIL", "token")
    assert "The bot refused the token" in token
    assert "`trialbot worker-token create gpu-x`" in token
    assert "ok    bot" in done.stdout and "skip  clock" in done.stdout


@needs_no_gpu
def test_bot_down_is_its_own_class_with_the_fix(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = run_doctor("--server", url, "--workdir", str(tmp_path))
    assert done.returncode == checks.GPU | checks.UNREACHABLE, done.stdout
    bot = line(done.stdout, "FAIL", "bot")
    assert f"The bot at {url} does not answer" in bot and "Connection refused" in bot
    assert "`trialbot serve`" in bot and "`ssh -N -L 3000:localhost:3000 bot-host`" in bot
    assert "skip  token" in done.stdout


@needs_no_gpu
def test_bad_recipes_file_is_its_own_class_and_names_the_line(rt, tmp_path):
    recipes = tmp_path / "recipes.toml"
    recipes.write_text('[recipes.x]\ncwd = "."\nargv = ["true"]\nshell = "sh"\n')
    done = run_doctor("--server", rt.server.url, "--recipes", str(recipes))
    assert done.returncode == checks.GPU | checks.RECIPES, done.stdout
    bad = line(done.stdout, "FAIL", "recipes")
    assert f"{recipes}:4: unknown key `shell`" in bad and "docs/recipes.md" in bad


def test_a_per_worker_token_under_another_name_is_a_token_failure(rt):
    from bot.http import tokens
    token = tokens.new_token()
    rt.store.add_worker_token("gpu-a", tokens.digest(token))
    ok = {x.what: x for x in checks.bot_lines(rt.server.url, token, "gpu-a")}
    assert ok["token"].status == "ok" and "worker `gpu-a`'s own token" in ok["token"].text
    bad = {x.what: x for x in checks.bot_lines(rt.server.url, token, "gpu-b")}
    assert bad["token"].code == checks.TOKEN and "another worker's" in bad["token"].text
    assert "`trialbot worker-token create gpu-b`" in bad["token"].text


@pytest.fixture
def untrusted_tls(tmp_path):
    """A TLS listener with a self-signed certificate, as a proxy with its own CA shows."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            try:
                ctx.wrap_socket(conn, server_side=True).close()
            except (OSError, ssl.SSLError):  # the client hangs up on the certificate
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_an_untrusted_certificate_is_named_with_its_fix(untrusted_tls):
    bot = checks.bot_lines(untrusted_tls, "wtoken", "w")[0]
    assert bot.code == checks.UNREACHABLE and "certificate is not trusted" in bot.text
    assert "`--ca-file`" in bot.text and "self-signed" in bot.text


class Ahead:
    """The bot's clock a minute ahead of this one: what an unsynced host shows."""

    def time(self):
        import time
        return time.time() + 60


def test_a_clock_a_minute_off_fails_with_the_offset(rt, monkeypatch):
    from bot.http import workerapi
    monkeypatch.setattr(workerapi, "time", Ahead())
    clock = {x.what: x for x in checks.bot_lines(rt.server.url, "wtoken", "w")}["clock"]
    assert clock.code == checks.CLOCK and "timedatectl set-ntp true" in clock.text
    offset = float(re.search(r"clock is ([+-][\d.]+) s", clock.text).group(1))
    assert 59 < offset < 61


def test_a_recipe_whose_program_is_missing_fails(tmp_path):
    recipes = tmp_path / "r.toml"
    recipes.write_text('[recipes.x]\ncwd = "."\nargv = ["no-such-program-here"]\n'
                       '[recipes.y]\ncwd = "."\nargv = [".venv/bin/python"]\n'
                       'setup = [["python3", "-m", "venv", ".venv"]]\n')
    lines = checks.recipe_lines(str(recipes), gpu_ok=True)
    assert [x.status for x in lines] == ["ok", "fail", "warn"]
    assert lines[1].code == checks.RECIPES and "`no-such-program-here`" in lines[1].text
    assert "fine if its setup makes it" in lines[2].text


def test_a_missing_work_directory_fails(tmp_path):
    (line_,) = checks.disk_lines(str(tmp_path / "gone"))
    assert line_.code == checks.DISK and "`--workdir DIR`" in line_.text


def test_a_wrong_option_exits_64_not_a_failure_class(capsys):
    with pytest.raises(SystemExit) as exit_:
        doctor.main(["--workdir"])
    assert exit_.value.code == checks.USAGE and "--workdir" in capsys.readouterr().err


def test_the_documented_exit_codes_are_the_code_s():
    text = (Path(ROOT) / "docs" / "doctor.md").read_text()
    text = text.split("## trialbot-worker doctor")[1].split("\n## ")[0]  # this doctor's part
    table = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.M))
    names = ("OK", "GPU", "UNREACHABLE", "TOKEN", "RECIPES", "DISK", "CLOCK", "USAGE")
    assert table == {str(getattr(checks, n)): n for n in names}
    assert f"{checks.CLOCK_LIMIT:g} s" in text and f"{checks.DISK_MIN // 2**30} GiB" in text


def test_a_token_file_the_worker_cannot_use_is_the_token_line(tmp_path):
    from argparse import Namespace
    token, (bad,) = doctor._token(Namespace(token_file=str(tmp_path / "none"), token=None))
    assert token is None and bad.code == checks.TOKEN
    assert "no such file" in bad.text and "mode 600" in bad.text
    loose = tmp_path / "token"
    loose.write_text("t0k\n")
    loose.chmod(0o644)
    token, (warn,) = doctor._token(Namespace(token_file=str(loose), token=None))
    assert token == "t0k" and warn.status == "warn" and f"chmod 600 {loose}" in warn.text
