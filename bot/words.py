"""Command text as people type it, made plain once where it enters (the /trial
and /plan handlers), so every parser and every echo sees the same words.

Phone keyboards and IMEs send look-alikes of the ASCII the grammar uses:
smart quotes, non-breaking and ideographic spaces, full-width `＝` and `４`.
Pure: text in, text out."""
from __future__ import annotations

import re
import unicodedata

DOUBLE_QUOTES = "“”„‟«»〝〞＂"
SINGLE_QUOTES = "‘’‚‛"
ZERO_WIDTH = "\u200b\u2060\ufeff"  # invisible; ZWJ/ZWNJ are kept (some scripts need them)

# Hangul compatibility jamo (ㅋ, ㅠ) and half-width Hangul: NFKC would turn them into
# conjoining jamo, which render differently alone. Korean text passes unchanged.
_KEEP = re.compile("[\u3130-\u318f\uffa0-\uffdc]+")
# An apostrophe inside a word (don’t, it’s) is text, not a quote: folding it to ' would
# open a quote that never closes.
_APOSTROPHE = re.compile(r"(?<=\w)’(?=\w)")


def normalize(text: str | None) -> str:
    """NFKC (full-width forms to ASCII), smart quotes to " and ', every Unicode
    space to a plain space, zero-width characters dropped."""
    if not text:
        return ""
    if text.isascii():  # nothing to fold but spaces: the same result, at a tenth of the cost
        return text.translate(_ASCII_SPACES)
    return _fold(text)


def _fold(text: str) -> str:
    out, at = [], 0
    for m in _KEEP.finditer(text):
        out += [unicodedata.normalize("NFKC", text[at:m.start()]), m.group()]
        at = m.end()
    out.append(unicodedata.normalize("NFKC", text[at:]))
    text = _APOSTROPHE.sub("\ue000", "".join(out))
    text = text.translate(_TABLE).replace("\ue000", "’")
    return "".join(" " if c.isspace() and c not in "\n" else c for c in text)


_TABLE = str.maketrans({**{c: '"' for c in DOUBLE_QUOTES}, **{c: "'" for c in SINGLE_QUOTES},
                        **{c: None for c in ZERO_WIDTH}})
_ASCII_SPACES = str.maketrans({c: " " for c in map(chr, range(128))
                                if c.isspace() and c != "\n"})
