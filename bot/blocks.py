"""Block Kit payloads: the same dict goes to Slack, to the console, and to
`--json`. Pure."""
from __future__ import annotations


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def table_text(rows: list[list]) -> str:
    """Rows as aligned columns, for a code block (Slack has no tables)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in rows)


def chunks(text: str, size: int = 2900) -> list[str]:
    """Section blocks hold 3000 characters; split on lines, keeping code fences whole."""
    out, cur = [], ""
    for line in text.split("\n"):
        if len(cur) + len(line) + 1 > size and cur:
            if cur.count("```") % 2:
                cur += "```"
                line = "```" + line
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    return out + [cur]


def reply(text: str) -> dict:
    """An ephemeral answer to the person who typed the command (split into
    sections: one holds 3,000 characters, and `/trial help` is longer)."""
    return {"response_type": "ephemeral", "text": text,
            "blocks": [section(part) for part in chunks(text)]}


def message(channel: str, text: str) -> dict:
    """A plain channel message (not an ephemeral reply)."""
    return {"channel": channel, "kind": "note", "text": text, "blocks": [section(text)]}


def plain(parts: list[str]) -> str:
    """The message's text: every paragraph, context lines without their marker."""
    return "\n".join(p[1:] if p.startswith("~") else p for p in parts)


def paragraphs(parts: list[str]) -> list[dict]:
    """Paragraphs as blocks: a section each, a context block for one starting with `~`."""
    blocks = []
    for part in parts:
        if len(blocks) >= 49:
            break
        blocks.append(context(part[1:]) if part.startswith("~") else section(part))
    return blocks
