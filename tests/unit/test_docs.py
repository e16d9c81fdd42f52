"""The docs inside the repo hold together: every relative link in README.md and
docs/ reaches a file, every #anchor a heading (by GitHub's slug rules), and no
file points outside the repository at the old shared design. Pure file
reading: no network, well under a second."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Spelled in two parts so this file does not match itself.
OUTSIDE = "../" + "shared"
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build"}

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed:
    a link shown as code is an example, not a link."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, INLINE_CODE.sub("", line)))
    return out


def heading_text(raw: str) -> str:
    """What GitHub renders of a heading: link text kept, markup dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("**", "").replace("*", "")


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case; everything but letters, digits,
    spaces, hyphens and underscores dropped; each space a hyphen."""
    text = heading_text(text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers; a repeated heading gets -1, -2 …"""
    seen: dict[str, int] = {}
    out = set()
    text = path.read_text(encoding="utf-8")
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(HTML_ID.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        found += [(n, target) for target in LINK.findall(line)]
        m = REF_DEF.match(line)
        if m:
            found.append((n, m.group(1)))
    return found


def broken(path: Path) -> list[str]:
    problems = []
    for n, target in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # absolute URLs: not checked (no network)
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{n}: ({target})"
        try:
            dest.relative_to(ROOT)
        except ValueError:
            problems.append(f"{where} leaves the repository")
            continue
        if not dest.exists():
            problems.append(f"{where} no such file {file_part}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} no heading #{anchor} in {dest.relative_to(ROOT)}")
        elif anchor and dest.is_dir():
            problems.append(f"{where} an anchor on a directory")
    return problems


def test_the_slug_rules_are_githubs():
    assert slug("3. The estimate") == "3-the-estimate"
    assert slug("4. Rent/buy rules") == "4-rentbuy-rules"
    assert slug("`/trial`, from Slack to the posted report") == \
        "trial-from-slack-to-the-posted-report"
    assert slug("The trial report (`trialbot.trial/1`)") == "the-trial-report-trialbottrial1"
    assert slug("Decode step — a model estimate") == "decode-step--a-model-estimate"
    assert slug("worker_api and [links](x.md)") == "worker_api-and-links"


def test_the_link_finder_sees_links_and_skips_code():
    sample = ROOT / "README.md"
    text = "[a](x.md#y) `[b](no.md)` ![img](pic.png) [c](<sp.md>)\n```\n[d](fenced.md)\n```\n"
    found = []
    for _, line in prose_lines(text):
        found += LINK.findall(line)
    assert found == ["x.md#y", "pic.png", "sp.md"]
    assert sample.exists()


def test_the_design_document_is_in_the_repo():
    design = ROOT / "docs" / "design.md"
    assert design.exists(), "docs/design.md is the project's design document"
    # Code comments cite "docs/design.md §n": those sections must exist.
    have = anchors(design)
    for n, name in ((1, "vocabulary"), (2, "what-is-measured"), (3, "the-estimate"),
                    (4, "rentbuy-rules"), (5, "the-optimization-ladder"), (6, "architecture")):
        assert f"{n}-{name}" in have, f"docs/design.md lost §{n} ({name})"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert path.exists()
    problems = broken(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_stays_a_landing_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 200, (f"README.md has {lines} lines; reference material belongs in docs/ "
                          "(the README is a landing page of about 200 lines at most)")


def repo_files() -> list[Path]:
    """Tracked files and new ones git does not ignore; a plain walk where
    there is no git checkout (an unpacked sdist)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True,
                             check=True, timeout=10).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
        return [ROOT / n for n in names if n.split("/", 1)[0] not in SKIP_DIRS]
    except (OSError, subprocess.SubprocessError):
        found = []
        for p in ROOT.rglob("*"):
            parts = p.relative_to(ROOT).parts
            if p.is_file() and not any(part in SKIP_DIRS or part.endswith(".egg-info")
                                       for part in parts):
                found.append(p)
        return found


def test_nothing_points_outside_the_repository_for_the_design():
    needle = OUTSIDE.encode()
    hits = []
    for p in repo_files():
        if not p.is_file():  # deleted in the working tree, or a submodule
            continue
        data = p.read_bytes()
        if needle in data:
            line = data[:data.index(needle)].count(b"\n") + 1
            hits.append(f"{p.relative_to(ROOT)}:{line}")
    assert not hits, (f"{OUTSIDE} is not in a clone of this repository; point at "
                      "docs/design.md instead:\n" + "\n".join(hits))
