"""What ended a recipe's program, as the program saw it (loaded by the
injected probe, sitecustomize.py): the exception that reached the top, the
module it could not import, the frames it passed through, and whether it came
out of transformers' own code, so the worker can name an environment problem
for what it is. Standard library only, Python 3.9 and newer.
"""
import os
import re
import sys
import traceback

FRAMES = 12
CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\(\) (got an unexpected keyword|takes |missing )")


def install(probe) -> None:
    previous = sys.excepthook

    def hook(kind, exc, tb):
        try:
            probe.exception = describe(kind, exc, tb)
        except Exception:  # noqa: BLE001 - a failure here must not hide the program's own
            pass
        previous(kind, exc, tb)

    sys.excepthook = hook


def describe(kind, exc, tb) -> dict:
    frames = traceback.extract_tb(tb)[-FRAMES:]
    return {"type": kind.__name__, "message": str(exc)[:1000],
            "frames": [{"file": f.filename, "line": f.lineno, "function": f.name} for f in frames],
            "module": getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
            "in_library": _library(frames, exc), "versions": _versions()}


def _library(frames, exc):
    """The library the error came out of: the innermost frame's, or the one
    that defines the callable a TypeError names (a call into it with
    arguments it no longer takes)."""
    if frames:
        top = _top_package(frames[-1].filename)
        if top:
            return top
    m = CALLED.search(str(exc)) if isinstance(exc, TypeError) else None
    if m:
        name = m.group(1).split(".")[0]
        for module in list(sys.modules.values()):
            found = vars(module).get(name) if hasattr(module, "__dict__") else None
            owner = getattr(found, "__module__", None) if found is not None else None
            if isinstance(owner, str) and owner.split(".")[0] not in ("__main__", ""):
                return owner.split(".")[0]
    if isinstance(exc, ImportError) and getattr(exc, "name", None) and \
            not isinstance(exc, ModuleNotFoundError):
        return exc.name.split(".")[0]
    return None


def _top_package(filename):
    """The installed distribution's top package a file belongs to (a file in
    site-packages), or None for the program's own files."""
    parts = os.path.normpath(filename).split(os.sep)
    # trialbot-worker-torch: the worker's torch, linked into a recipe's environment
    for marker in ("site-packages", "dist-packages", "trialbot-worker-torch"):
        if marker in parts:
            i = parts.index(marker)
            if i + 1 < len(parts):
                return parts[i + 1].rsplit(".py", 1)[0]
    return None


def _versions():
    """Versions of the libraries a paper's code is most often pinned to."""
    out = {}
    try:
        from importlib import metadata
    except ImportError:
        return out
    for name in ("torch", "transformers", "accelerate", "datasets", "flash-attn"):
        if name.replace("-", "_") in sys.modules:
            try:
                out[name] = metadata.version(name)
            except Exception:  # noqa: BLE001 - imported from a path, not installed
                pass
    return out
