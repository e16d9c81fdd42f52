"""Where a trial may run: `gpu=H100`, `min_mem=80GB` and `label=team=nlp` on
`/trial`, matched against what workers registered (GPU names and memory,
device, labels). Pure: words and worker infos in, a route and answers out."""
from __future__ import annotations

import re

from bot.fits import gpus
from bot.states import Json
from worker.i18n import _

KEYS = ("gpu=", "min_mem=", "label=")
LABEL = re.compile(r"[A-Za-z0-9_.-]{1,40}")


class RouteError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def take(words: list[str]) -> tuple[list[str], Json]:
    """Take the routing words out of `words` (they are not workload parameters):
    the rest, and the route {gpu, min_mem, labels} (empty when none). An unknown
    GPU name, a min_mem that is not a size or a malformed label raises."""
    route: Json = {}
    rest = []
    for w in words:
        if not w.startswith(KEYS):
            rest.append(w)
            continue
        key, _eq, value = w.partition("=")
        if key in route and key != "label":
            raise RouteError(_("`{word}`: {key}= is given twice; give one", word=w, key=key))
        if key == "gpu" and (value.lower() == "any" or "anywhere" in route):
            if "gpu" in route or "anywhere" in route:  # gpu=any with gpu=H100, or twice
                raise RouteError(_("`{word}`: {key}= is given twice; give one", word=w,
                                   key="gpu"))
            route["anywhere"] = True  # no GPU asked for: a plan's target is not applied
        elif key == "gpu" and value.lower() in ("", "cpu", "none"):
            raise RouteError(_("`{word}`: gpu= names a GPU kind (e.g. gpu=H100); `gpu=any` "
                               "runs on any worker, CPU-only ones too", word=w))
        elif key == "gpu":
            route["gpu"] = gpu_name(value)
        elif key == "min_mem":
            try:
                route["min_mem"] = gpus.size_of(value, "min_mem")
            except ValueError as exc:
                raise RouteError(str(exc)) from None
        else:
            k, eq, v = value.partition("=")
            if not (eq and LABEL.fullmatch(k) and LABEL.fullmatch(v)):
                raise RouteError(_("`{word}`: a label is written `label=KEY=VALUE`, e.g. "
                                   "`label=team=nlp` (letters, digits, `_.-`)", word=w))
            route.setdefault("labels", {})[k] = v
    return rest, route


def gpu_name(name: str) -> str:
    """A GPU of the one table (bot/fits/gpus.py) by its table name; a family that
    means several sizes (`A100`) as the family, since routing needs only the kind;
    else, unless it is a typo of a table name, the name as written (a part the table
    lacks), matched against the names workers report. `cpu` and `none` name no GPU."""
    if name.lower() in ("", "cpu", "none"):  # a plan's target `gpu=cpu` routes nowhere
        raise RouteError(_("`gpu={name}` names no GPU kind", name=name))
    try:
        return gpus.named(name).name
    except gpus.GpuNameError as exc:
        family = gpus.family_of(name)
        if exc.why == "ambiguous" and family is not None:  # an ambiguous name is a family
            return family
        if exc.why == "unknown":  # a part the table lacks: kept, matched by whole words
            return name
        raise RouteError(f"`gpu={name}`: {exc}") from None


def matches(info: Json, route: Json | None) -> bool:
    """Whether a worker with `info` satisfies `route`."""
    if not route:
        return True
    names, memory = info.get("gpus") or [], info.get("gpu_memory") or []
    if "gpu" in route and not any(gpus.matches_gpu(_env(n), route["gpu"]) for n in names):
        return False
    if "min_mem" in route and not (memory and max(memory) >= route["min_mem"]):
        return False
    labels = info.get("labels") or {}
    return all(labels.get(k) == v for k, v in (route.get("labels") or {}).items())


def routed(route: Json | None) -> bool:
    """Whether `route` narrows where a trial runs (`gpu=any` does not)."""
    return any(k in (route or {}) for k in ("gpu", "min_mem", "labels"))


def describe(route: Json) -> str:
    parts = [f"gpu={route['gpu']}"] if "gpu" in route else (
        ["gpu=any"] if route.get("anywhere") else [])
    if "min_mem" in route:
        parts.append(f"min_mem={route['min_mem'] / 2**30:.1f}GiB")
    parts += [f"label={k}={v}" for k, v in (route.get("labels") or {}).items()]
    return " ".join(parts)


def worker_line(w: Json) -> str:
    """A worker and what it has, for answers that list them."""
    info = w["info"]
    names, memory = info.get("gpus") or [], info.get("gpu_memory") or []
    hw = (", ".join(f"{n} ({m / 2**30:.0f} GiB)" if m else n
                    for n, m in zip(names, memory or [None] * len(names)))
          or _("no GPU, {cpus} CPU cores", cpus=info.get("cpus", "?")))
    labels = " ".join(f"{k}={v}" for k, v in sorted((info.get("labels") or {}).items()))
    device = info.get("device") or ("cuda" if names else "cpu")
    if labels:
        return _("{name}: {device}, {hardware}, labels {labels}", name=w["name"],
                 device=device, hardware=hw, labels=labels)
    return f"{w['name']}: {device}, {hw}"


def _env(gpu: str) -> Json:
    return {"env": {"gpu_count": 1, "gpu_name": gpu}}
