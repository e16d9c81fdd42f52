"""Declared dependencies, read without running anything: requirements*.txt,
setup.py (its syntax tree; never executed), setup.cfg, pyproject.toml and
environment.yml.

environment.yml is read by a small reader of its own (PyYAML is not a worker
dependency): the top-level `dependencies:` list, its `- name=version` conda
entries and its nested `- pip:` list, one entry a line. Anchors, flow lists
(`[a, b]`) and multi-line strings are not read; such a file is named unread.
"""
from __future__ import annotations

import ast
import configparser
import re
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from worker.compat.report import Pin, Unread

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

NAMES = ("setup.py", "setup.cfg", "pyproject.toml", "environment.yml", "environment.yaml")
REQUIREMENTS = re.compile(r"requirements.*\.(txt|in)$", re.IGNORECASE)


class Found:
    """What the dependency files gave: pins, what could not be read, and the rest."""

    def __init__(self) -> None:
        self.pins: list[Pin] = []
        self.unread: list[Unread] = []
        self.files: list[str] = []
        self.requires_python: list[str] = []
        self.indexes: list[str] = []
        self.find_links: list[str] = []  # pages of wheel links (`-f .../torch_stable.html`)


def is_dependency_file(name: str) -> bool:
    return name in NAMES or bool(REQUIREMENTS.match(name))


def read(root: Path, paths: list[Path]) -> Found:
    found = Found()
    for path in sorted(paths):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            found.unread.append(Unread(rel, 0, "encoding", str(exc)))
            continue
        found.files.append(rel)
        reader = _READERS.get(path.name, _requirements)
        try:
            reader(text, rel, found)
        except (TypeError, AttributeError, ValueError) as exc:
            # A file of the right syntax but the wrong shape (`dependencies = [1]`,
            # `project = "x"`, a NUL byte in setup.py): named, never the worker's crash.
            found.unread.append(Unread(rel, 0, "format", f"{type(exc).__name__}: {exc}"))
    return found


def _pin(text: str, rel: str, line: int, found: Found, group: str = "") -> None:
    """One PEP 508 requirement, or an unread line naming the parser's complaint."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        found.unread.append(Unread(rel, line, "format", f"{text}: {exc}"))
        return
    found.pins.append(Pin(canonicalize_name(req.name), str(req.specifier), rel, line, group,
                          str(req.marker or ""), req.url or ""))


def _requirements(text: str, rel: str, found: Found) -> None:
    group = "" if Path(rel).name == "requirements.txt" else Path(rel).name
    for number, raw in _logical_lines(text):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        if line.startswith(("--extra-index-url", "--index-url", "-i ")):
            found.indexes.append(line.split(None, 1)[-1].split("=", 1)[-1].strip())
        elif line.startswith(("-f ", "--find-links")):
            found.find_links.append(line.split(None, 1)[-1].split("=", 1)[-1].strip())
        elif line.startswith(("-r ", "--requirement", "-c ", "--constraint")):
            continue  # that file is read on its own when it is in the tree
        elif line.startswith(("-e ", "--editable")):
            target = line.split(None, 1)[-1]
            egg = re.search(r"#egg=([\w.-]+)", target)
            if egg:
                found.pins.append(Pin(canonicalize_name(egg.group(1)), "", rel, number, group,
                                      url=target.split("#", 1)[0]))
        elif line.startswith("-"):
            continue  # another pip option (--no-binary, --hash): no requirement in it
        else:
            _pin(line, rel, number, found, group)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with their first line number, a trailing backslash joining the next."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _line_of(text: str, needle: str) -> int:
    """The first line holding `needle` (tomllib and configparser keep no lines)."""
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return 0


def _pyproject(text: str, rel: str, found: Found) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found.unread.append(Unread(rel, 0, "format", str(exc)))
        return
    project = data.get("project", {})
    for dep in project.get("dependencies", []):
        _pin(dep, rel, _line_of(text, dep), found)
    for extra, deps in project.get("optional-dependencies", {}).items():
        for dep in deps:
            _pin(dep, rel, _line_of(text, dep), found, extra)
    if "requires-python" in project:
        found.requires_python.append(f"{rel}: {project['requires-python']}")
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    for name, spec in poetry.items():
        if name.lower() == "python":
            found.requires_python.append(f"{rel}: {spec}")
            continue
        version = spec if isinstance(spec, str) else str(spec.get("version", ""))
        # Poetry's ^ and ~ are not PEP 440: kept as written, for a person to read.
        found.pins.append(Pin(canonicalize_name(name), "" if version == "*" else version, rel,
                              _line_of(text, name), "poetry"))
    if "dynamic" in project and "dependencies" in project["dynamic"]:
        found.unread.append(Unread(rel, _line_of(text, "dynamic"), "computed",
                                   "dependencies are dynamic (set by the build backend)"))


def _setup_cfg(text: str, rel: str, found: Found) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        found.unread.append(Unread(rel, 0, "format", str(exc).splitlines()[0]))
        return
    if parser.has_option("options", "python_requires"):
        found.requires_python.append(f"{rel}: {parser.get('options', 'python_requires')}")
    sections = [("options", "install_requires", "")]
    if parser.has_section("options.extras_require"):
        sections += [("options.extras_require", key, key)
                     for key in parser.options("options.extras_require")]
    for section, key, group in sections:
        if not parser.has_option(section, key):
            continue
        for dep in parser.get(section, key).splitlines():
            dep = dep.split("#", 1)[0].strip()
            if dep:
                _pin(dep, rel, _line_of(text, dep), found, group)


def _setup_py(text: str, rel: str, found: Found) -> None:
    try:
        tree = ast.parse(text, rel)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        found.unread.append(Unread(rel, getattr(exc, "lineno", 0) or 0, "syntax",
                                   getattr(exc, "msg", str(exc))))
        return
    names = _literal_names(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", getattr(n.func, "attr", "")) == "setup"]
    for call in calls:
        for kw in call.keywords:
            if kw.arg == "install_requires":
                _setup_list(kw.value, names, rel, found, "")
            elif kw.arg == "extras_require":
                _setup_extras(kw.value, names, rel, found)
            elif kw.arg == "python_requires":
                value = _literal(kw.value, names)
                if isinstance(value, str):
                    found.requires_python.append(f"{rel}: {value}")


def _literal_names(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level `NAME = <expr>` assignments, so `install_requires=REQS` is read."""
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
    return out


def _literal(node: ast.expr, names: dict[str, ast.expr]) -> object:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _setup_list(node: ast.expr, names: dict[str, ast.expr], rel: str, found: Found,
                group: str) -> None:
    value = _literal(node, names)
    if isinstance(value, str):
        value = value.splitlines()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        found.unread.append(Unread(rel, node.lineno, "computed", ast.unparse(node)[:120]))
        return
    text_line = node.lineno
    for dep in value:
        if dep.strip():
            _pin(dep.strip(), rel, text_line, found, group)


def _setup_extras(node: ast.expr, names: dict[str, ast.expr], rel: str, found: Found) -> None:
    value = _literal(node, names)
    if not isinstance(value, dict):
        found.unread.append(Unread(rel, node.lineno, "computed", ast.unparse(node)[:120]))
        return
    for extra, deps in value.items():
        if isinstance(deps, str):
            deps = [deps]
        for dep in deps if isinstance(deps, (list, tuple)) else ():
            if isinstance(dep, str) and dep.strip():
                _pin(dep.strip(), rel, node.lineno, found, str(extra))


def _environment(text: str, rel: str, found: Found) -> None:
    """The `dependencies:` list (see the module's docstring for what is read)."""
    inside, pip_indent = False, -1
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            inside = line.startswith("dependencies:")
            pip_indent = -1
            continue
        item = line.strip()
        if not inside or not item.startswith("- "):
            if inside and item.startswith(("[", "&", "*", "|", ">")):
                found.unread.append(Unread(rel, number, "format", item))
            continue
        entry = item[2:].strip().strip("'\"")
        if entry == "pip:":
            pip_indent = indent
        elif pip_indent >= 0 and indent > pip_indent:
            _pin(entry, rel, number, found, "pip")
        else:
            pip_indent = -1
            _conda(entry, rel, number, found)


def _conda(entry: str, rel: str, number: int, found: Found) -> None:
    """`name`, `name=1.2`, `name>=1.2`, `channel::name=1.2=build`: conda's syntax,
    kept as written (conda's `=1.2` means 1.2.*, not pip's exact pin)."""
    entry = entry.split("::", 1)[-1]
    m = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)$", entry)
    if not m:
        found.unread.append(Unread(rel, number, "format", entry))
        return
    spec = m.group(2).strip()
    if spec.startswith("=") and not spec.startswith("=="):
        spec = "=" + spec.split("=")[1]  # the build string after a second "=" dropped
    if m.group(1).lower() == "python":
        found.requires_python.append(f"{rel}: {spec or '(any)'}")
        return
    found.pins.append(Pin(canonicalize_name(m.group(1)), spec, rel, number, "conda"))


_READERS = {"setup.py": _setup_py, "setup.cfg": _setup_cfg, "pyproject.toml": _pyproject,
            "environment.yml": _environment, "environment.yaml": _environment}
