"""Messages in the reader's language: gettext catalogs, read with Babel.

It lives beside worker/spec.py for the same reason: the bot shows the
worker's parameter checks to users, so both mark messages with this `_`. Only
the bot ever speaks anything but English (a worker's console is English), so
Babel is needed only where a catalog is read: the bot.

A message is written once, in English, as one sentence with named
placeholders: `_("Trial {id} queued", id=12)`. `_` looks the sentence up in
the catalog of the language in use and fills the placeholders afterwards, so a
translation may move them. Numbers, units and command words are placeholders
or backticked, and stay as they are in every language (tests/unit/test_i18n.py).

The catalogs are `worker/locale/LANG/LC_MESSAGES/trialbot.po`, kept with
`scripts/i18n` (extract, update, check). They are compiled in memory when first
used: no generated binary lives in the repository.

Which language: the one `using(lang)` set for this command (a channel's own
setting), else the process's default (`set_default`, from TRIALBOT_LANG), else
English. A context variable, so each of
Bolt's listener threads has its own.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import gettext
import io
from collections.abc import Iterator
from pathlib import Path

LANGS = {"en": "English", "ko": "한국어"}
DEFAULT = "en"  # the language messages are written in
DOMAIN = "trialbot"
LOCALE_DIR = Path(__file__).with_name("locale")

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("trialbot_lang",
                                                                      default=None)
_default = DEFAULT  # the process's own (TRIALBOT_LANG), where no channel chose one


class LanguageError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def language(raw: str) -> str:
    """A language code the bot speaks ("ko", "KO", "ko_KR" → "ko"), or LanguageError."""
    code = (raw or "").strip().lower().replace("-", "_").split("_")[0]
    if code not in LANGS:
        known = ", ".join(f"`{c}` ({n})" for c, n in LANGS.items())
        raise LanguageError(f"`{raw}` is not a language this bot speaks; use one of {known}")
    return code


def current() -> str:
    return _current.get() or _default


def default() -> str:
    """The process's language (TRIALBOT_LANG), where no channel chose one."""
    return _default


def set_default(lang: str) -> None:
    """The language of every message no channel setting decides (TRIALBOT_LANG)."""
    global _default
    _default = language(lang)


@contextlib.contextmanager
def using(lang: str | None) -> Iterator[None]:
    """Messages made inside speak `lang` (None: keep the language in use)."""
    token = _current.set(language(lang)) if lang else None
    try:
        yield
    finally:
        if token is not None:
            _current.reset(token)


@functools.cache
def catalog(lang: str) -> gettext.NullTranslations:
    """`lang`'s catalog, compiled from its .po in memory (English: the messages as written)."""
    po = LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"
    if lang == DEFAULT or not po.exists():
        return gettext.NullTranslations()
    from babel.messages import mofile, pofile  # only where a catalog is read

    with po.open("rb") as fh:
        messages = pofile.read_po(fh, locale=lang, domain=DOMAIN)
    buf = io.BytesIO()
    mofile.write_mo(buf, messages, use_fuzzy=False)
    buf.seek(0)
    return gettext.GNUTranslations(buf)


def _(message: str, /, **values) -> str:
    """`message` in the language in use, its {placeholders} filled from `values`."""
    text = catalog(current()).gettext(message)
    return text.format(**values) if values else text


def ngettext(singular: str, plural: str, n: int, /, **values) -> str:
    """The form for `n` (Korean has one), filled from `values` (n included)."""
    text = catalog(current()).ngettext(singular, plural, n)
    return text.format(n=n, **values)


def pgettext(context: str, message: str, /, **values) -> str:
    """`message` where one English word means two things ("runs": a count in a
    table's column, a component of GPU-hours): `context` tells them apart."""
    text = catalog(current()).pgettext(context, message)
    return text.format(**values) if values else text


def N_(message: str, /) -> str:
    """Marks a message kept in a constant; `_(CONSTANT)` translates it where it is shown."""
    return message
