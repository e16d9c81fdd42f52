"""Where an hf-infer / hf-train model comes from: `model=NAME`.

Pure and torch-free (the worker registers what it has without importing
transformers). A name is, in this order:

- a preset (`model=mistral-7b`): the config.json shipped in worker/hfconfigs/,
  recorded from the public config of the hub model the preset names;
- a config in a directory the worker's operator allows (`--models DIR`):
  `DIR/NAME/config.json`, `DIR/NAME` (a .json file) or `DIR/NAME.json`;
- a hub id (`model=org/name`) when the operator allows the hub (`--hub`):
  its config.json only, never weights.

Weights are always random: a trial measures memory and time, which depend on
the shapes. The allowed directories and the hub switch reach the trial's child
through the environment (TRIALBOT_MODELS, TRIALBOT_HUB), set by the worker.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from worker import notes, presets

PRESET_DIR = Path(__file__).parent / "hfconfigs"
ENV_DIRS, ENV_HUB = "TRIALBOT_MODELS", "TRIALBOT_HUB"
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB; a bigger file is not one


class ModelError(ValueError):
    """`model=` names nothing this worker may build; the message says how to fix it."""


def allowed_dirs() -> list[str]:
    return [d for d in os.environ.get(ENV_DIRS, "").split(os.pathsep) if d]


def hub_allowed() -> bool:
    return os.environ.get(ENV_HUB) == "1"


HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def is_hub_id(name: str) -> bool:
    return bool(HUB_ID.fullmatch(name)) and ".." not in name


def _source(found: dict, note: dict) -> dict:
    """Where the config came from, in English and as a message (worker/notes.py)."""
    return {**found, "source": notes.english(note), "source_note": note}


def resolve(name: str, dirs: list[str] | None = None, hub: bool | None = None) -> dict:
    """{"name", "kind": preset|file|hub, "path" or "hub_id", "config" (None for
    the hub: fetched by transformers), "source"}; ModelError when not allowed."""
    dirs = allowed_dirs() if dirs is None else dirs
    hub = hub_allowed() if hub is None else hub
    preset = presets.get(name)
    if preset:
        preset_file = PRESET_DIR / f"{name}.json"
        return _source({"name": name, "kind": "preset", "path": str(preset_file),
                        "config": read(preset_file)},
                       notes.message(notes.SOURCE_PRESET, source=preset.source))
    for d in dirs:
        path = find(d, name)
        if path:
            return _source({"name": name, "kind": "file", "path": str(path),
                            "config": read(path)},
                           notes.message(notes.SOURCE_FILE, path=str(path), directory=d))
    if is_hub_id(name):
        if not hub:
            raise ModelError(f"`model={name}` looks like a hub id, and this worker may not "
                             "fetch configs from the Hugging Face hub; save its config.json "
                             "in the worker's --models directory and name it, or start the "
                             "worker with --hub")
        return _source({"name": name, "kind": "hub", "hub_id": name, "config": None},
                       notes.message(notes.SOURCE_HUB, name=name))
    where = (f"in the worker's --models {', '.join(dirs)}" if dirs else
             "and the worker allows no directory of configs (--models DIR)")
    raise ModelError(f"`model={name}` is not a preset ({presets.known()}) nor a config "
                     f"{where}; name a preset, put NAME/config.json in a --models directory, "
                     "or give a hub id org/name to a worker started with --hub")


def find(directory: str, name: str) -> Path | None:
    """The config file `name` names inside `directory`, or None. A name that
    leads out of the directory (.., an absolute path, a symlink out) is None."""
    if not name or ".." in Path(name).parts or os.path.isabs(name):
        return None
    root = Path(directory).resolve()
    for candidate in (Path(directory) / name / "config.json", Path(directory) / name,
                      Path(directory) / f"{name}.json"):
        real = candidate.resolve()
        if real.is_file() and real.suffix == ".json" and root in real.parents:
            return real
    return None


def read(path: str | Path) -> dict:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelError(f"{path} is over {MAX_CONFIG_BYTES >> 10} KiB: not a config.json")
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read ({exc.strerror}); check its permissions"
                         ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path} is not valid JSON ({exc}); give a Hugging Face config.json"
                         ) from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelError(f"{path} has no `model_type`: it is not a Hugging Face config.json "
                         "(transformers picks the architecture by it)")
    return data


def depth(config: dict) -> int | None:
    """The config's number of layers, as transformers reads it."""
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    value = text.get("num_hidden_layers", text.get("n_layer", text.get("num_layers")))
    return value if isinstance(value, int) else None


def summary(config: dict) -> dict:
    """What the bot is told about a model: enough to refuse bad words early."""
    return {"model_type": config.get("model_type"), "layers": depth(config),
            "architectures": config.get("architectures") or []}


def listing(dirs: list[str]) -> dict[str, dict]:
    """The configs in the allowed directories, by name, for the worker's
    registration; a file that is not a config is listed with its error."""
    out: dict[str, dict] = {}
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            continue
        for entry in sorted(root.iterdir()):
            name = entry.name[:-5] if entry.is_file() and entry.suffix == ".json" else entry.name
            path = find(d, name)
            if path is None or name in out:
                continue
            try:
                out[name] = summary(read(path))
            except ModelError as exc:
                out[name] = {"error": str(exc)}
    return out


def installed(distribution: str) -> str | None:
    """A package's version without importing it (the worker never imports
    transformers or torch itself)."""
    from importlib import metadata
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def capabilities(dirs: list[str], hub: bool) -> dict:
    """What the worker registers for hf-* routing: transformers and flash-attn
    (by version), the hub switch, and its configs. Each config is built on the
    meta device in a child first, so one transformers cannot build, or an
    attn= its class does not support, is refused by the bot before a job exists."""
    models = listing(dirs)
    out = {"transformers": installed("transformers"), "flash_attn": installed("flash_attn")
           or installed("flash-attn"), "hub": hub, "models": models}
    names = [n for n, m in models.items() if "error" not in m]
    if out["transformers"] and names:
        for name, built in buildable(names, dirs).items():
            if built.get("error"):
                models[name] = {"error": built["error"]}
            elif built.get("attn"):
                models[name]["attn"] = built["attn"]
    elif names:
        for name in names:
            models[name]["unchecked"] = "transformers is not installed on this worker"
    return out


def buildable(names: list[str], dirs: list[str]) -> dict[str, dict]:
    """{name: {"attn": the attn= choices it supports} or {"error": why
    transformers cannot build it}}, asked in one child."""
    import subprocess
    import sys
    env = {**os.environ, ENV_DIRS: os.pathsep.join(dirs), "HF_HUB_OFFLINE": "1"}
    try:
        done = subprocess.run([sys.executable, "-m", "worker.workloads.hf", *names],
                              capture_output=True, text=True, timeout=600, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {name: {} for name in names}  # unchecked: the trial says it, if so
