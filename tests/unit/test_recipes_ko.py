"""A recipe file's refusal reads in the language of whoever starts the worker
(TRIALBOT_LANG), where a person reads it: `trialbot-worker --recipes FILE` and
`trialbot console --recipes FILE` both refuse to start naming the file's line;
the English is unchanged (docs/i18n.md)."""
from __future__ import annotations

import signal

import pytest

from bot.app import cli as bot_cli
from worker import cli as worker_cli
from worker import i18n, recipes

BROKEN = """\
[recipes.echo]
cwd = "."
argv = ["echo", "{batch}"]
requires = "tpu"
"""


@pytest.fixture
def broken(tmp_path, monkeypatch):
    monkeypatch.setattr(i18n, "_default", "en")  # main() sets the process's language
    path = tmp_path / "recipes.toml"
    path.write_text(BROKEN)
    return str(path)


def refusal(broken: str, lang: str) -> str:
    with i18n.using(lang), pytest.raises(recipes.RecipeError) as err:
        recipes.load(broken)
    return str(err.value)


def test_the_error_names_the_line_in_english_as_before(broken):
    assert refusal(broken, "en") == (f'{broken}:4: `requires` must be "cuda" or "any", '
                                     "not 'tpu'")


def test_the_error_reads_in_korean_and_keeps_the_line_and_values(broken):
    said = refusal(broken, "ko")
    assert said == f"{broken}:4: `requires`는 \"cuda\" 또는 \"any\"여야 합니다. 지금 값: 'tpu'"


@pytest.mark.parametrize("text, korean", [
    ('[recipes.echo]\ncwd = "."\n',
     "레시피 `echo`에 `argv` 키가 필요합니다 (비어 있지 않은 문자열 목록)"),
    ('[recipes.echo]\ncwd = "."\nargv = ["x"]\nbatch = 1\n',
     "레시피 `echo`에 알 수 없는 키가 있습니다: `batch`."),
    ('[recipes.echo]\ncwd = "."\nargv = ["x"]\n[recipes.echo.params]\nn = { type = "int" }\n',
     "파라미터 `n`에 기본값(default)이 필요합니다"),
    ("[recipes.echo\n", "파일이 올바른 TOML이 아닙니다: "),
    # what its own environment names (worker/environment.py), under the recipe's name
    ('[recipes.echo]\nargv = ["x"]\nrepo = "https://example.org/r.git"\n',
     "레시피 `echo`: `repo`에는 `commit`이 필요합니다"),
])
def test_each_kind_of_mistake_is_korean(tmp_path, text, korean):
    path = tmp_path / "recipes.toml"
    path.write_text(text)
    assert korean in refusal(str(path), "ko")


def test_trialbot_worker_refuses_to_start_in_korean(broken, monkeypatch, capsys):
    monkeypatch.setenv("TRIALBOT_LANG", "ko")
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # main() takes SIGTERM
    with pytest.raises(SystemExit) as exited:
        worker_cli.main(["--recipes", broken, "trial", "help"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"trialbot-worker: 시작하지 않습니다: {broken}:4: `requires`는" in err


def test_trialbot_console_refuses_to_start_in_korean(broken, monkeypatch, capsys):
    """The console reads the recipe file before it opens the database: the
    language must be set by then."""
    monkeypatch.setenv("TRIALBOT_LANG", "ko")
    with pytest.raises(SystemExit) as exited:
        bot_cli.main(["console", "--recipes", broken])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"trialbot console: 시작하지 않습니다: {broken}:4: `requires`는" in err
    monkeypatch.delenv("TRIALBOT_LANG")
    i18n.set_default("en")
    with pytest.raises(SystemExit):
        bot_cli.main(["console", "--recipes", broken])
    assert (f"trialbot console: refusing to start: {broken}:4: `requires` must be"
            in capsys.readouterr().err)
