"""Messages in the reader's language: gettext catalogs, read with Babel.

It lives beside worker/spec.py for the same reason: the bot shows the
worker's parameter checks to users, so both mark messages with this `_`. The
worker's console and doctor speak TRIALBOT_LANG too, so Babel is a dependency
of the worker's own install (docs/i18n.md).

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
from collections.abc import Iterable, Iterator
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


def close(word: str, known: Iterable[str]) -> str | None:
    """The one of `known` that `word` is most likely a slip of (difflib's ratio at
    least 0.75, case aside: `bacth` is `batch`, `shwo` is `show`), as `known`
    spells it; None when none is that close."""
    import difflib  # only when a word is wrong

    names = {k.lower(): k for k in known}
    found = difflib.get_close_matches(word.lower(), list(names), n=1, cutoff=0.75)
    return names[found[0]] if found else None


def sentences(*parts: str) -> str:
    """Whole sentences, each translated on its own, as one message (empty ones left out)."""
    return " ".join(p for p in parts if p)


def did_you_mean(word: str, known: Iterable[str], before: str = "", after: str = "") -> str:
    """"Did you mean `batch=2`?" for a slip of one of `known` (the one sentence every
    refusal of a misspelt key, word or sub-command adds), in the language in use;
    "" when none is close. The suggestion is backticked between `before` and `after`
    (`/trial ` before a sub-command, `=2` after a key)."""
    found = close(word, known)
    return _("Did you mean {word}?", word=f"`{before}{found}{after}`") if found else ""


# strftime's %a is the C locale's English whatever the reader's language: these are read
WEEKDAYS = (N_("Mon"), N_("Tue"), N_("Wed"), N_("Thu"), N_("Fri"), N_("Sat"), N_("Sun"))


def stamp(when, pattern: str = "") -> str:
    """`when` (a date or datetime) as its weekday in the language in use, then
    `pattern` (strftime's, without %a): stamp(d, "%H:%M") → "Mon 09:00", "월 09:00"."""
    day = _(WEEKDAYS[when.weekday()])
    return f"{day} {format(when, pattern)}" if pattern else day


# argparse's own words (Python 3.11's msgids), which it reads through gettext's
# global `_` and `ngettext`: bound at its import, looked up at each call.
ARGPARSE = (N_("usage: "), N_("options"), N_("positional arguments"),
            N_("show this help message and exit"), N_("%(prog)s: error: %(message)s\n"),
            N_("the following arguments are required: %s"), N_("unrecognized arguments: %s"),
            N_("argument %(argument_name)s: %(message)s"),
            N_("invalid choice: %(value)r (choose from %(choices)s)"),
            N_("invalid %(type)s value: %(value)r"), N_("expected one argument"),
            N_("expected at most one argument"), N_("expected at least one argument"),
            N_("ambiguous option: %(option)s could match %(matches)s"),
            N_("not allowed with argument %s"), N_("one of the arguments %s is required"),
            N_("ignored explicit argument %r"))


def argparse_follows() -> None:
    """argparse's headings and errors ("usage:", "invalid choice") in the language
    in use: it keeps no catalog of ours, so its two gettext names are pointed at
    ours (a msgid we lack stays English)."""
    import argparse

    argparse._ = lambda message: catalog(current()).gettext(message)  # type: ignore[attr-defined]
    argparse.ngettext = (  # type: ignore[attr-defined]
        lambda singular, plural, n: catalog(current()).ngettext(singular, plural, n))
