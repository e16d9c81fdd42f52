"""`trialbot-worker` speaks TRIALBOT_LANG (docs/i18n.md): its help, the trial
help and the doctor, as a child process run from a shell."""
import os
import subprocess

from conftest import BIN, ROOT


def worker(*args, lang: str | None):
    env = {k: v for k, v in os.environ.items() if k != "TRIALBOT_LANG"}
    if lang is not None:
        env["TRIALBOT_LANG"] = lang
    return subprocess.run([str(BIN / "trialbot-worker"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=env)


def test_help_is_korean_under_trialbot_lang_ko():
    ko = worker("--help", lang="ko")
    assert ko.returncode == 0, ko.stderr
    assert "trialbot 서버의 트라이얼을 실행합니다." in ko.stdout
    assert "Slack에 보이는 워커 이름" in ko.stdout and "--stop-grace SECONDS" in ko.stdout
    assert "이 워커가 실행할 수 있는 명령의 레시피 파일(TOML)" in ko.stdout
    en = worker("--help", lang=None)
    assert "Run trials for a trialbot server." in en.stdout and "워커" not in en.stdout


def test_trial_help_and_doctor_are_korean(tmp_path):
    trial_help = worker("trial", "help", lang="ko").stdout
    assert "워크로드와 파라미터" in trial_help
    assert "decoder-only transformer" not in trial_help  # each workload's summary too
    done = worker("doctor", "--server", "http://127.0.0.1:9", "--workdir", str(tmp_path),
                  lang="ko")
    assert done.returncode & 2, done.stdout  # the bot is unreachable: its bit is set
    assert "의 trialbot-worker doctor:" in done.stdout
    assert "http://127.0.0.1:9의 봇이 응답하지 않습니다" in done.stdout
    assert "남음." in done.stdout and "Fix:" not in done.stdout
    help_ko = worker("doctor", "--help", lang="ko").stdout
    assert "이 머신이 trialbot 워커로 준비되었는지 점검합니다" in help_ko


def test_an_unknown_language_stops_the_worker_naming_the_choices():
    done = worker("--help", lang="fr")
    assert done.returncode == 2 and done.stdout == ""
    assert "TRIALBOT_LANG: `fr` is not a language" in done.stderr and "`ko`" in done.stderr


def test_argparse_s_headings_and_errors_are_korean():
    help_ko = worker("--help", lang="ko").stdout
    assert help_ko.startswith("사용법: trialbot-worker") and "\n옵션:\n" in help_ko
    assert "이 도움말을 보이고 끝냅니다" in help_ko and "options:" not in help_ko
    bad = worker("--executor", "nope", lang="ko")
    assert bad.returncode == 2
    assert "trialbot-worker: 오류: 인자 --executor: 잘못된 선택: 'nope'" in bad.stderr
    assert "인자 --server: 인자 하나가 필요합니다" in worker("doctor", "--server", lang="ko").stderr
    assert "invalid choice" in worker("--executor", "nope", lang=None).stderr


def test_the_worker_s_own_refusals_are_korean(tmp_path):
    for args, says in (
            (["--server", "http://127.0.0.1:9"], "--token-file이 없습니다"),
            (["--server", "http://127.0.0.1:9", "--token-file", str(tmp_path / "none")],
             "그런 파일이 없습니다. 토큰이 든 파일을 주십시오"),
            (["--server", "http://127.0.0.1:9", "--token", "t", "--stop-grace", "-1"],
             "0부터 86400까지의 초여야 합니다. 예: `--stop-grace 6`"),
            (["--server", "http://127.0.0.1:9", "--token", "t", "--gpus", "two"],
             "`auto` 또는 GPU 수를 쓰십시오"),
            (["--server", "http://127.0.0.1:9", "--token", "t", "--executor", "slurm"],
             "--executor slurm에는 --partition이 필요합니다")):
        done = worker(*args, lang="ko")
        assert done.returncode == 2 and says in done.stderr, done.stderr
    token = worker("--server", "http://127.0.0.1:9", "--token", "t", "--gpus", "two", lang="ko")
    assert "trialbot-worker: 경고: --token은 토큰을 명령줄에 두므로" in token.stderr
    trial = worker("trial", "bogus", lang="ko")
    assert trial.returncode == 2 and "오류: 워크로드가 아닙니다: `bogus`" in trial.stderr
    assert "사용법: trialbot-worker trial <llm-infer" in trial.stderr
    assert "/trial status" not in trial.stderr and "error" not in trial.stderr
