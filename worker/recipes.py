"""Recipes: an admin's allowlist of commands a worker may run, from a TOML file
(`trialbot-worker --recipes FILE`). A recipe measures a paper's own code
without changing it; only recipes in the file can run.

    [recipes.adkv-infer]
    cwd = "/srv/papers/adkv"            # relative paths are relative to the file
    argv = ["python", "infer.py", "--batch", "{batch}", "--seq", "{seq}"]
    setup = [["pip", "install", "-r", "requirements.txt"]]   # timed as `setup`
    env = { HF_HUB_OFFLINE = "1" }
    secret_env = ["HF_TOKEN"]           # values never shown in reports (from env or the worker's)
    requires = "cuda"                   # or "any"
    timeout = "2h"                      # seconds, or "90s" / "30m" / "2h"
    unit = "generate"                   # what one run is: program (default), generate,
                                        # forward, or mark:NAME (docs/recipes.md)

    [recipes.adkv-infer.params]
    batch = { type = "int", min = 1, max = 512, default = 8 }
    seq = { type = "int", min = 1, max = 131072, default = 4096 }

Parameter values are checked against their type and substituted into whole
argv elements; nothing ever goes through a shell. `{python}` stands for the
worker's own interpreter, so a recipe can run in the worker's environment.
"""
from __future__ import annotations

import os
import re
import string
import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from worker import environment
from worker.environment import EnvironmentProblem, EnvSpec
from worker.i18n import _
from worker.spec import COMMON, Param, Workload

# The recipe's own environment (worker/environment.py)
ENV_KEYS = ("repo", "commit", "requirements", "packages", "python", "torch")

RECIPE_KEYS = {"cwd", "argv", "setup", "env", "requires", "timeout", "params", "description",
               "secret_env", "unit", *ENV_KEYS}
PARAM_KEYS = {"type", "min", "max", "default", "choices", "pattern", "max_length", "help"}
PARAM_TYPES = {"int", "float", "choice", "string"}
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
PARAM_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What one run of a recipe is (docs/recipes.md#what-one-run-is): the whole
# invocation, each outermost generate, each outermost model call, or each span
# the program marks with a name (`TRIALBOT_UNIT NAME`).
UNITS = ("program", "generate", "forward")
UNIT_MARK = re.compile(r"mark:([A-Za-z0-9][A-Za-z0-9._-]{0,62})")


class RecipeError(ValueError):
    """A recipe file the worker refuses to start with: `at` (FILE:LINE, or the
    file) and what is wrong there, in the language in use (the file is read at
    the worker's start, after TRIALBOT_LANG is set)."""

    def __init__(self, at: str, text: str):
        super().__init__(f"{at}: {text}")


@dataclass(frozen=True)
class Recipe:
    name: str
    cwd: str
    argv: tuple[str, ...]
    setup: tuple[tuple[str, ...], ...]
    env: dict
    requires: str
    timeout: int
    params: tuple[Param, ...]
    description: str = ""
    secret_env: tuple[str, ...] = ()  # variables whose values are masked in reports
    environment: EnvSpec = EnvSpec()  # its own environment, when it declares one
    unit: str = "program"  # what one run is: program, generate, forward or mark:NAME

    def secrets(self, environ=None) -> list[str]:
        """The values of secret_env: the recipe's own, else the worker's."""
        environ = os.environ if environ is None else environ
        return [v for v in (self.env.get(n, environ.get(n)) for n in self.secret_env) if v]

    def workload(self) -> Workload:
        """The recipe as a workload: its own parameters plus the common ones,
        with the recipe's timeout as the default."""
        # The recipe's timeout is the default and the most a request may ask for.
        common = tuple(Param(p.name, p.kind, self.timeout, p.help, p.low, self.timeout)
                       if p.name == "timeout" else
                       # A program cannot be split: N processes cost N programs
                       # (docs/benchmarks.md), so a recipe asks for them.
                       Param(p.name, p.kind, 1, p.help, p.low, p.high)
                       if p.name == "processes" else p for p in COMMON)
        return Workload(self.name, self.description or " ".join(self.argv), self.params + common,
                        recipe=True, requires=self.requires)

    def command(self, params: dict, python: str | None = None) -> list[str]:
        """argv with parameter values substituted, each element staying one element;
        `{python}` is the recipe environment's interpreter, else the worker's."""
        return [_fill(a, params, python or sys.executable) for a in self.argv]


def _fill(template: str, params: dict, python: str) -> str:
    return template.format_map({**params, "python": python})


def load(path: str, env_cache: str | None = None) -> dict[str, Recipe]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise RecipeError(path, _("cannot read the recipe file: {error}",
                                   error=exc.strerror)) from None
    text = raw.decode("utf-8", "replace")
    try:
        data = tomllib.loads(text)  # a duplicate recipe name is a TOML error with its line
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(path, _("the file is not valid TOML: {error}", error=exc)) from None
    where = _Locator(path, text)
    unknown = set(data) - {"recipes"}
    if unknown:
        key = sorted(unknown)[0]
        raise RecipeError(where.key(None, key), _("unknown top-level key `{key}`; the file "
                                                  "holds [recipes.NAME] tables", key=key))
    if not isinstance(data.get("recipes", {}), dict):
        raise RecipeError(where.key(None, "recipes"),
                          _("`recipes` must be tables [recipes.NAME]"))
    recipes = {}
    for name, table in (data.get("recipes") or {}).items():
        recipes[name] = _recipe(name, table, where, os.path.dirname(os.path.abspath(path)),
                                env_cache or environment.default_cache())
    if not recipes:
        raise RecipeError(path, _("no [recipes.NAME] table; nothing could run"))
    return recipes


def _recipe(name: str, t, where: _Locator, base: str, cache: str) -> Recipe:
    _check_keys(name, t, where)
    argv = _need(name, t, where, "argv", _strings, _("a non-empty list of strings"))
    env_spec = _environment(name, t, where, base, cache)
    cwd = _cwd(name, t, where, base, env_spec)
    try:
        environment.check_spec(env_spec, cwd)
    except EnvironmentProblem as exc:
        first = next((k for k in ENV_KEYS if k in t), "repo")
        raise RecipeError(where.key(name, first),
                          _("recipe `{name}`: {problem}", name=name, problem=exc)) from None
    setup, env, secret_env = _run_with(name, t, where)
    requires, timeout, unit = _measure(name, t, where)
    params = _params(name, t, where, argv)
    return Recipe(name, cwd, tuple(argv), tuple(tuple(c) for c in setup), dict(env), requires,
                  timeout, params, t.get("description", ""), tuple(secret_env), env_spec,
                  unit=unit)


def _check_keys(name: str, t, where: _Locator) -> None:
    at = where.table(name)
    if not NAME.fullmatch(name):
        raise RecipeError(at, _("recipe name `{name}` must be lower-case letters, digits, "
                                "`-` or `_`", name=name))
    if not isinstance(t, dict):
        raise RecipeError(at, _("recipes.{name} must be a table", name=name))
    for key in t:
        if key not in RECIPE_KEYS:
            raise RecipeError(where.key(name, key), _(
                "unknown key `{key}` in recipe `{name}`; allowed: {allowed}", key=key,
                name=name, allowed=", ".join(sorted(RECIPE_KEYS))))


def _need(name: str, t: dict, where: _Locator, key: str, ok, what: str):
    """A required key's value, refused with `what` it must be."""
    if key not in t:
        raise RecipeError(where.table(name), _("recipe `{name}` needs `{key}` ({what})",
                                               name=name, key=key, what=what))
    if not ok(t[key]):
        raise RecipeError(where.key(name, key), _("`{key}` in recipe `{name}` must be {what}",
                                                  key=key, name=name, what=what))
    return t[key]


def _strings(v):
    return isinstance(v, list) and v and all(isinstance(x, str) for x in v)


def _cwd(name: str, t: dict, where: _Locator, base: str, env_spec: EnvSpec) -> str:
    """The recipe's directory: inside its checkout (made when the trial runs)
    with `repo`, else one on this worker, relative to the recipe file."""
    if env_spec.repo:
        cwd = t.get("cwd", ".")
        if not isinstance(cwd, str) or os.path.isabs(cwd) or ".." in cwd.split("/"):
            raise RecipeError(where.key(name, "cwd"), _(
                "with `repo`, `cwd` of `{name}` is a directory inside the repository, like "
                "\".\" or {example}", name=name, example='"scripts"'))
        return cwd
    cwd = _need(name, t, where, "cwd", lambda v: isinstance(v, str) and v,
                _("a directory path"))
    cwd = os.path.normpath(os.path.join(base, cwd))
    if not os.path.isdir(cwd):
        raise RecipeError(where.key(name, "cwd"), _(
            "cwd `{cwd}` of recipe `{name}` is not a directory on this worker", cwd=cwd,
            name=name))
    return cwd


def _run_with(name: str, t: dict, where: _Locator) -> tuple[list, dict, list]:
    """`setup`, `env` and `secret_env`: what runs before, and the environment."""
    setup = t.get("setup", [])
    if not (isinstance(setup, list) and all(_strings(c) for c in setup)):
        raise RecipeError(where.key(name, "setup"), _(
            "`setup` must be a list of argv lists, e.g. {example}",
            example='[["pip", "install", "-r", "requirements.txt"]]'))
    env = t.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise RecipeError(where.key(name, "env"), _("`env` must be a table of strings"))
    secret_env = t.get("secret_env", [])
    if not (isinstance(secret_env, list) and all(isinstance(v, str) and ENV_NAME.fullmatch(v)
                                                  for v in secret_env)):
        raise RecipeError(where.key(name, "secret_env"), _(
            "`secret_env` must be a list of variable names, e.g. {example}",
            example='["HF_TOKEN"]'))
    return setup, env, secret_env


def _measure(name: str, t: dict, where: _Locator) -> tuple[str, int, str]:
    """`requires`, `timeout` and `unit`: where and how a trial is measured."""
    requires = t.get("requires", "any")
    if requires not in ("cuda", "any"):
        raise RecipeError(where.key(name, "requires"), _(
            "`requires` must be \"cuda\" or \"any\", not {value}", value=repr(requires)))
    timeout = _seconds(t.get("timeout", 1800))
    if timeout is None:
        raise RecipeError(where.key(name, "timeout"), _(
            "`timeout` must be seconds or a duration like \"90s\", \"30m\", \"2h\""))
    unit = t.get("unit", "program")
    if not (unit in UNITS or (isinstance(unit, str) and UNIT_MARK.fullmatch(unit))):
        raise RecipeError(where.key(name, "unit"), _(
            "`unit` of recipe `{name}` is {value}; it must be \"program\" (the whole "
            "invocation), \"generate\", \"forward\" or \"mark:NAME\" (spans the program marks "
            "with `TRIALBOT_UNIT NAME`; NAME letters, digits, `.`, `_`, `-`)", name=name,
            value=repr(unit)))
    return requires, timeout, unit


def _params(name: str, t: dict, where: _Locator, argv: list[str]) -> tuple[Param, ...]:
    """The recipe's own params; its argv may use them, the common ones and {python}."""
    if not isinstance(t.get("params", {}), dict):
        raise RecipeError(where.key(name, "params"), _(
            "`params` of `{name}` must be a table [recipes.{name}.params]", name=name))
    params = tuple(_param(name, k, v, where) for k, v in (t.get("params") or {}).items())
    declared = {p.name for p in params} | {p.name for p in COMMON} | {"python"}
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg)]
        except ValueError as exc:
            raise RecipeError(where.key(name, "argv"), _(
                "argv element {arg} of `{name}`: {error}; write a literal brace as {{{{ or }}}}",
                arg=repr(arg), name=name, error=exc)) from None
        for field_name in fields:
            if field_name is not None and field_name not in declared:
                raise RecipeError(where.key(name, "argv"), _(
                    "argv of `{name}` uses `{field}`, which is not one of its params",
                    name=name, field="{" + field_name + "}"))
    clash = {p.name for p in params} & {p.name for p in COMMON}
    if clash:
        raise RecipeError(where.table(name + ".params"), _(
            "param `{param}` is reserved for every trial; rename it", param=sorted(clash)[0]))
    return params


def _environment(name: str, t: dict, where: _Locator, base: str, cache: str) -> EnvSpec:
    """The recipe's own environment keys, checked for type; what they name is
    checked by environment.check_spec."""
    def text(key):
        v = t.get(key)
        if v is not None and not (isinstance(v, str) and v.strip()):
            raise RecipeError(where.key(name, key), _(
                "`{key}` in recipe `{name}` must be a non-empty string", key=key, name=name))
        return v

    def texts(key, example):
        v = t.get(key, [])
        if not (isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v)):
            raise RecipeError(where.key(name, key), _(
                "`{key}` in recipe `{name}` must be a list of strings, e.g. {example}", key=key,
                name=name, example=example))
        return tuple(x.strip() for x in v)

    repo, commit, python = text("repo"), text("commit"), text("python")
    if repo and environment.is_local(repo):
        repo = os.path.normpath(os.path.join(base, os.path.expanduser(repo)))
    requirements = texts("requirements", '["requirements.txt"] or ["."]')
    for entry in requirements:
        if os.path.isabs(entry) or ".." in entry.split("/"):
            raise RecipeError(where.key(name, "requirements"), _(
                "requirements entry `{entry}` of `{name}` must be a path inside the repository",
                entry=entry, name=name))
    packages = texts("packages", '["accelerate==0.21.0"]')
    for pin in packages:
        if pin.startswith("-") or not environment.REQUIREMENT.fullmatch(pin):
            raise RecipeError(where.key(name, "packages"), _(
                "`{pin}` in `packages` of `{name}` is not a requirement like \"name==1.2\"",
                pin=pin, name=name))
    torch = t.get("torch", "worker")
    if torch not in environment.TORCH_MODES:
        raise RecipeError(where.key(name, "torch"), _(
            "`torch` in recipe `{name}` must be \"worker\" (this box's torch, the default) or "
            "\"recipe\", not {value}", name=name, value=repr(torch)))
    found = EnvSpec(repo, commit, requirements, packages, python, torch, cache)
    if "torch" in t and not found.declared:
        raise RecipeError(where.key(name, "torch"), _(
            "`torch` in recipe `{name}` chooses the torch of its own environment, and it "
            "declares none: add `requirements`, `packages`, `repo` or `python`, or remove "
            "`torch`", name=name))
    return found


def _param(recipe: str, name: str, d, where: _Locator) -> Param:
    at = where.key(recipe + ".params", name)
    if not PARAM_NAME.fullmatch(name) or name == "python":
        raise RecipeError(at, _("param name `{name}` must be lower-case letters, digits and "
                                "`_`, and not `python` (that stands for the worker's "
                                "interpreter)", name=name))
    if not isinstance(d, dict):
        raise RecipeError(at, _("param `{name}` must be a table like {example}", name=name,
                                example='{ type = "int", min = 1, max = 8, default = 1 }'))
    for key in d:
        if key not in PARAM_KEYS:
            raise RecipeError(at, _("unknown key `{key}` in param `{name}`; allowed: {allowed}",
                                    key=key, name=name, allowed=", ".join(sorted(PARAM_KEYS))))
    kind = d.get("type")
    if kind not in PARAM_TYPES:
        raise RecipeError(at, _("param `{name}` needs type = one of {types}", name=name,
                                types=", ".join(sorted(PARAM_TYPES))))
    if "default" not in d:
        raise RecipeError(at, _("param `{name}` needs a default", name=name))
    number = (int,) if kind == "int" else (int, float)
    if kind in ("int", "float"):
        for key in ("min", "max"):
            if not isinstance(d.get(key), number) or isinstance(d.get(key), bool):
                raise RecipeError(at, _("{kind} param `{name}` needs a numeric `{key}`",
                                        kind=kind, name=name, key=key))
    if kind == "choice" and not (isinstance(d.get("choices"), list) and d["choices"]
                                 and all(isinstance(c, str) for c in d["choices"])):
        raise RecipeError(at, _("choice param `{name}` needs choices = a list of strings",
                                name=name))
    max_length = d.get("max_length", 256)
    if not isinstance(max_length, int) or isinstance(max_length, bool) or not \
            1 <= max_length <= 4096:
        raise RecipeError(at, _("`max_length` of `{name}` must be a whole number 1-4096",
                                name=name))
    if kind == "int" and not isinstance(d["default"], int):
        raise RecipeError(at, _("default of int param `{name}` must be a whole number",
                                name=name))
    if "pattern" in d:
        try:
            re.compile(d["pattern"])
        except (re.error, TypeError) as exc:
            raise RecipeError(at, _("pattern of `{name}` is not a regular expression: {error}",
                                    name=name, error=exc)) from None
    p = Param(name, kind, d["default"], d.get("help", ""), d.get("min"), d.get("max"),
              tuple(d.get("choices", ())), d.get("pattern"), max_length)
    try:  # the default must itself be a valid value
        p.parse(str(d["default"]), "")
    except ValueError as exc:
        raise RecipeError(at, _("default of `{name}` is not allowed: {why}", name=name,
                                why=getattr(exc, "message", exc))) from None
    return p


def _seconds(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    m = re.fullmatch(r"(\d+)\s*([smh])", v) if isinstance(v, str) else None
    if not m or int(m.group(1)) == 0:
        return None
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


class _Locator:
    """Finds the line of a table or key, so errors point at the file's line."""

    def __init__(self, path: str, text: str):
        self.path, self.lines = path, text.splitlines()

    def _header(self, table: str) -> int | None:
        pattern = re.compile(r"\s*\[\s*recipes\s*\.\s*"
                             + re.escape(table).replace(r"\.", r"\s*\.\s*")
                             + r"\s*\]")
        return next((i for i, line in enumerate(self.lines) if pattern.match(line)), None)

    def table(self, table: str) -> str:
        i = self._header(table)
        return f"{self.path}:{i + 1}" if i is not None else self.path

    def key(self, table: str | None, key: str) -> str:
        start = (self._header(table) if table else -1)
        start = -1 if start is None else start
        pattern = re.compile(r"\s*" + re.escape(key) + r"\s*=")
        for i in range(start + 1, len(self.lines)):
            if table and self.lines[i].lstrip().startswith("[") and i > start + 1 \
                    and not self.lines[i].lstrip().startswith("[["):
                break
            if pattern.match(self.lines[i]):
                return f"{self.path}:{i + 1}"
        return self.table(table) if table else self.path
