"""Block Kit payloads: the same dict goes to Slack, to the console, and to
`--json`. Pure."""
from __future__ import annotations

import re
import unicodedata

LIMIT = 3000  # characters of one section's or context element's text (Slack's limit)
FALLBACK = 3900  # characters of a message's `text`: Slack recommends under 4,000


def clip(text: str, limit: int = LIMIT) -> str:
    """At most `limit` characters, cut at a word boundary and ended with "…"."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.8:  # a word boundary near the end; else a very long word is cut
        cut = cut[:space]
    return cut.rstrip() + "…"


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text)}}


def context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(text)}]}


def width(text: str) -> int:
    """Columns `text` takes in a monospace font: a Korean syllable (East Asian
    wide or full-width) takes two, so a Korean header still lines up."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def table_text(rows: list[list]) -> str:
    """Rows as aligned columns, for a code block (Slack has no tables)."""
    widths = [max(width(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c) + " " * (w - width(str(c))) for c, w in zip(r, widths))
                     .rstrip() for r in rows)


def chunks(text: str, size: int = 2900) -> list[str]:
    """Section blocks hold 3000 characters; split on lines, keeping code fences
    whole, and a line longer than a section (a long note) at word boundaries, so
    all of it is shown."""
    out, cur = [], ""
    for line in _wrapped(text.split("\n"), size):
        if len(cur) + len(line) + 1 > size and cur:
            if cur.count("```") % 2:
                cur += "```"
                line = "```" + line
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    return out + [cur]


def _wrapped(lines: list[str], size: int) -> list[str]:
    out = []
    for line in lines:
        while len(line) > size:
            space = line.rfind(" ", 0, size)
            cut = space if space > size // 2 else size
            out.append(line[:cut])
            line = line[cut:].lstrip(" ")
        out.append(line)
    return out


def reply(text: str) -> dict:
    """An ephemeral answer to the person who typed the command (split into
    sections: one holds 3,000 characters, and `/trial help` is longer)."""
    return {"response_type": "ephemeral", "text": text,
            "blocks": [section(part) for part in chunks(text)]}


def help_reply(text: str, more: str) -> dict:
    """A help reply: all of `text` in the blocks, and a fallback `text` (notifications,
    clients without blocks) under Slack's 4,000 characters, cut at a line and ended
    with `more` (where the rest is) when `text` is longer."""
    out = reply(text)
    if len(text) <= FALLBACK:
        return out
    cut = text[:FALLBACK - len(more) - 1]
    cut = cut[:cut.rfind("\n")] if "\n" in cut else cut
    return {**out, "text": f"{cut}\n{more}"}


def about(lines: list[str], command: str, word: str) -> list[str]:
    """The help lines whose backticked commands use `word` (`/trial help sweep`: each
    line with a `/trial sweep ...` in backticks, or a backticked word that starts
    with it: `unlock` beside `/plan NAME lock`)."""
    used = re.compile(rf"`(?:{re.escape(command)}\b[^`]*)?(?<![\w=-]){re.escape(word)}\b[^`]*`")
    return [line for line in lines if used.search(line)]


def message(channel: str, text: str) -> dict:
    """A plain channel message (not an ephemeral reply)."""
    return {"channel": channel, "kind": "note", "text": text, "blocks": [section(text)]}


def plain(parts: list[str]) -> str:
    """The message's text: every paragraph, context lines without their marker."""
    return "\n".join(p[1:] if p.startswith("~") else p for p in parts)


def paragraphs(parts: list[str]) -> list[dict]:
    """Paragraphs as blocks: a section each, a context block for one starting with `~`."""
    blocks: list[dict] = []
    for part in parts:
        if len(blocks) >= 49:
            break
        blocks.append(context(part[1:]) if part.startswith("~") else section(part))
    return blocks
