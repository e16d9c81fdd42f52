"""The bot's local worker warns at its start that its trials run as root; a
person reads it at the console, so it speaks TRIALBOT_LANG (docs/i18n.md)."""
import logging
import os

from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from worker import i18n

ROOT_KO = "로컬 워커가 트라이얼을 root로 실행합니다: 트라이얼이 이 봇의 Slack 토큰"
ROOT_EN = "the local worker runs trials as root: a trial can read this bot's Slack tokens"


def started_as_root(tmp_path, caplog, monkeypatch, lang: str) -> str:
    monkeypatch.setattr(i18n, "_default", lang)  # as `trialbot console` sets it
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    caplog.clear()
    rt = Runtime(str(tmp_path / f"{lang}.db"), "token-x",
                 ConsoleTransport(open(os.devnull, "w"), False), port=0)
    rt.start()
    try:
        with caplog.at_level(logging.WARNING, logger="trialbot"):
            rt.start_local_worker(f"box-{lang}")
    finally:
        rt.stop()
    return caplog.text


def test_the_root_warning_follows_trialbot_lang(tmp_path, caplog, monkeypatch):
    korean = started_as_root(tmp_path, caplog, monkeypatch, "ko")
    assert ROOT_KO in korean and ROOT_EN not in korean
    english = started_as_root(tmp_path, caplog, monkeypatch, "en")
    assert ROOT_EN in english and ROOT_KO not in english
