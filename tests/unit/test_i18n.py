"""Messages in Korean: the catalog covers every marked message, and translations
keep the placeholders, command words and numbers (docs/i18n.md)."""
from __future__ import annotations

import argparse
import threading

import pytest
from babel.messages.catalog import Catalog

from bot import catalogs
from worker import i18n


def test_every_marked_message_has_a_korean_translation():
    assert catalogs.problems("ko") == []


def _source(tmp_path, monkeypatch, *lines: str) -> None:
    """A source tree of one module, bot/m.py, that the catalog reads instead of ours."""
    (tmp_path / "bot").mkdir()
    (tmp_path / "worker").mkdir()
    (tmp_path / "bot" / "m.py").write_text("from worker.i18n import _\n" + "".join(
        line + "\n" for line in lines))
    monkeypatch.setattr(catalogs, "ROOT", tmp_path)


def test_a_message_without_translation_is_found(tmp_path, monkeypatch):
    _source(tmp_path, monkeypatch, 'A = _("Trial {id} queued on `{worker}`", id=1, worker="w")',
            'B = _("at most 40 characters")', 'C = _("no translation yet")')
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path / "locale")
    ko = Catalog(locale="ko", domain=i18n.DOMAIN)
    ko.add("Trial {id} queued on `{worker}`", "시험 {n} 대기 중: `{worker}`")  # placeholder renamed
    ko.add("at most 40 characters", "최대 4자")  # number changed
    catalogs.write("ko", ko)
    found = catalogs.problems("ko")
    assert any("placeholders differ" in p and "Trial {id}" in p for p in found)
    assert any("numbers differ" in p and "40 characters" in p for p in found)
    assert any("no ko translation for 'no translation yet'" in p and "bot/m.py:4" in p
               for p in found)
    assert len(found) == 3


def test_using_sets_the_language_for_this_thread_only(tmp_path, monkeypatch):
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    ko = Catalog(locale="ko", domain=i18n.DOMAIN)
    ko.add("Trial {id} queued", "시험 {id} 대기 중")
    ko.add(("{n} trial", "{n} trials"), ("시험 {n}개",))
    monkeypatch.setattr(catalogs.i18n, "LOCALE_DIR", tmp_path)
    catalogs.write("ko", ko)
    i18n.catalog.cache_clear()
    other = []
    try:
        with i18n.using("ko"):
            thread = threading.Thread(
                target=lambda: other.append(i18n._("Trial {id} queued", id=2)))
            thread.start()
            thread.join()
            assert i18n._("Trial {id} queued", id=7) == "시험 7 대기 중"
            assert i18n.ngettext("{n} trial", "{n} trials", 3) == "시험 3개"
        assert i18n._("Trial {id} queued", id=7) == "Trial 7 queued"
        assert i18n.ngettext("{n} trial", "{n} trials", 1) == "1 trial"
        assert other == ["Trial 2 queued"]  # another thread keeps its own language
    finally:
        i18n.catalog.cache_clear()


@pytest.mark.parametrize("raw, code", [("ko", "ko"), ("KO", "ko"), ("ko_KR", "ko"),
                                       ("ko-KR", "ko"), ("en", "en")])
def test_language_codes(raw, code):
    assert i18n.language(raw) == code


def test_an_unknown_language_is_refused_naming_the_choices():
    with pytest.raises(i18n.LanguageError) as exc:
        i18n.language("fr")
    assert "`fr` is not a language" in exc.value.message and "`ko` (한국어)" in exc.value.message


def _ctx(tmp_path):
    from bot.app.runtime import context
    from bot.store import Store
    return context(Store(str(tmp_path / "t.db")))


def _plan(ctx, text, channel="C1", user="U1"):
    import datetime as dt

    from bot import commands
    return commands.plan(ctx, text, user, channel, dt.date(2026, 12, 1))["text"]


def test_a_channel_chooses_its_language_and_others_keep_theirs(tmp_path):
    ctx = _ctx(tmp_path)
    assert "the bot's default" in _plan(ctx, "settings") and "(`en`)" in _plan(ctx, "settings")
    assert "(`ko`)" in _plan(ctx, "settings lang=KO")
    assert ctx.store.channel_lang("C1") == "ko" and ctx.store.channel_lang("C2") is None
    assert "(`en`)" in _plan(ctx, "settings", channel="C2")
    bad = _plan(ctx, "settings lang=fr")
    assert "`fr` is not a language" in bad and ctx.store.channel_lang("C1") == "ko"
    assert "the bot's default" in _plan(ctx, "settings lang=")
    assert ctx.store.channel_lang("C1") is None


def test_the_process_default_applies_where_no_channel_chose(monkeypatch):
    monkeypatch.setattr(i18n, "_default", "en")
    i18n.set_default("ko")
    assert i18n.current() == "ko"
    with i18n.using("en"):
        assert i18n.current() == "en"
    with pytest.raises(i18n.LanguageError):
        i18n.set_default("xx")


def test_a_message_built_in_the_call_is_found(tmp_path, monkeypatch):
    _source(tmp_path, monkeypatch, 'A = _(f"Trial {x} queued")', 'B = _("Trial " + x)',
            'C = _(KIND or OTHER)')
    found = catalogs.unextractable()
    assert [f.split(":")[1] for f in found] == ["2", "3"]
    assert "is not a plain string" in found[0]


def _parser():
    parser = argparse.ArgumentParser(prog="trialbot-worker")
    parser.add_argument("--executor", choices=("local", "slurm"), required=True)
    return parser


def test_argparse_s_own_words_follow_the_language_in_use(capsys):
    """argparse reads "usage:", "options" and its errors through gettext: pointed
    at our catalog, a Korean console reads them in Korean, an English one as before."""
    i18n.argparse_follows()
    with i18n.using("ko"):
        parser = _parser()
        text = parser.format_help()
        assert "사용법: trialbot-worker" in text and "옵션:" in text
        assert "이 도움말을 보이고 끝냅니다" in text and "usage:" not in text
        for argv, says in ((["--executor", "nope"], "인자 --executor: 잘못된 선택: 'nope'"),
                           ([], "다음 인자가 필요합니다: --executor"),
                           (["--executor", "local", "x"], "알 수 없는 인자: x")):
            with pytest.raises(SystemExit):
                parser.parse_args(argv)
            err = capsys.readouterr().err
            assert f"trialbot-worker: 오류: {says}" in err and "error" not in err, err
    with i18n.using("en"):
        assert "usage: trialbot-worker" in _parser().format_help()
        with pytest.raises(SystemExit):
            _parser().parse_args(["--executor", "nope"])
        assert "error: argument --executor: invalid choice" in capsys.readouterr().err
