"""The catalogs' upkeep: the messages the source asks for (read by Babel's
extractor), and what each language's catalog lacks. `scripts/i18n` and
tests/unit/test_i18n.py both use it, so the check a developer runs is the test."""
from __future__ import annotations

import ast
import contextlib
import io
import re
from collections import Counter
from pathlib import Path

from babel.messages import pofile
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir

from worker import i18n

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("bot", "worker")  # the worker's parameter checks reach users through the bot
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2), "pgettext": ((1, "c"), 2)}
PLACEHOLDER = re.compile(r"(?<!\{)\{([a-z_][a-z0-9_]*)(?:[:!][^}]*)?\}(?!\})")
BACKTICKED = re.compile(r"`[^`]+`")
# A number is digits not inside a word of ASCII letters (T12, bf16): Korean counters
# follow a number directly ("30일", "2개"), so a Hangul neighbour does not hide it.
NUMBER = re.compile(r"(?<![0-9A-Za-z_.])\d+(?:[.,]\d+)*(?![0-9A-Za-z_])")


def template() -> Catalog:
    """Every message the bot's source marks for translation, with where it is used."""
    pot = Catalog(domain=i18n.DOMAIN, project="trialbot")
    # Babel warns of every f-string inside a marked call, values included; a message
    # that is itself not a plain string is what unextractable() finds.
    with contextlib.redirect_stderr(io.StringIO()):
        for source in SOURCES:
            for file, line, message, comments, context in extract_from_dir(
                    str(ROOT / source), [("**.py", "python")], keywords=KEYWORDS,
                    strip_comment_tags=True):
                pot.add(message, locations=[(f"{source}/{file}", line)],
                        auto_comments=comments, context=context)
    return pot


def unextractable() -> list[str]:
    """Marked calls whose message is not a plain string (`_(f"...")`, `_(a + b)`):
    Babel cannot read them, so they would stay English without any check noticing.
    `_(CONSTANT)`, `_(a or b)` and the like translate a message marked elsewhere
    (N_) and pass."""
    out = []
    for source in SOURCES:
        for file in sorted((ROOT / source).rglob("*.py")):
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in KEYWORDS and node.args
                        and _built(node.args[0])):
                    out.append(f"{file.relative_to(ROOT)}:{node.lineno}: the message given "
                               f"to {node.func.id}() is not a plain string, so it cannot be "
                               "translated: write one string with named placeholders")
    return out


def _built(node: ast.expr) -> bool:
    """A message made in the call itself: an f-string, `+`/`%`, or `.format()`."""
    return (isinstance(node, (ast.JoinedStr, ast.BinOp))
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "format"))


def path(lang: str) -> Path:
    return i18n.LOCALE_DIR / lang / "LC_MESSAGES" / f"{i18n.DOMAIN}.po"


def read(lang: str) -> Catalog:
    file = path(lang)
    if not file.exists():
        return Catalog(locale=lang, domain=i18n.DOMAIN, project="trialbot", version="",
                       copyright_holder="the trialbot developers",
                       msgid_bugs_address="the trialbot developers",
                       last_translator="the trialbot developers",
                       language_team="the trialbot developers", fuzzy=False,
                       header_comment=f"# {i18n.LANGS[lang]} messages of trialbot: "
                                      "`scripts/i18n update` adds new ones (docs/i18n.md).")
    with file.open("rb") as fh:
        return pofile.read_po(fh, locale=lang, domain=i18n.DOMAIN)


def write(lang: str, catalog: Catalog) -> None:
    path(lang).parent.mkdir(parents=True, exist_ok=True)
    with path(lang).open("wb") as fh:
        pofile.write_po(fh, catalog, width=100, sort_by_file=True, include_previous=True)


def update(lang: str) -> Catalog:
    """`lang`'s catalog brought up to the source: new messages added untranslated,
    changed ones marked fuzzy (Babel's matching), gone ones dropped."""
    catalog = read(lang)
    catalog.update(template(), no_fuzzy_matching=False)
    catalog.obsolete.clear()
    return catalog


def strings(message) -> tuple | list:
    return message if isinstance(message, (tuple, list)) else (message,)


def problems(lang: str) -> list[str]:
    """What stops `lang`'s catalog from translating every message the source marks:
    missing, empty or fuzzy translations, and translations whose placeholders,
    backticked command words or numbers differ from the English."""
    catalog, out = read(lang), unextractable()
    for message in template():
        if not message.id:
            continue
        where = ", ".join(f"{f}:{n}" for f, n in message.locations[:2])
        english = strings(message.id)
        found = catalog.get(message.id, context=message.context)
        if found is None or not all(strings(found.string)):
            out.append(f"{where}: no {lang} translation for {english[0]!r}")
            continue
        if found.fuzzy:
            out.append(f"{where}: the {lang} translation is fuzzy (the English changed): "
                       f"{english[0]!r}")
            continue
        for text in strings(found.string):
            out += [f"{where}: {lang} {what} differ from the English in {english[0]!r}"
                    for what, pattern in (("placeholders", PLACEHOLDER),
                                          ("backticked words", BACKTICKED),
                                          ("numbers", NUMBER))
                    if _kept(pattern, english[0]) != _kept(pattern, text)]
    return out


def _kept(pattern: re.Pattern, text: str) -> Counter:
    return Counter(m.group(0) for m in pattern.finditer(text))
