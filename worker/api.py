"""What the bot may use of the worker: its one door (with worker.i18n, whose
`_`/`N_` nearly every bot module calls). `lint-imports` holds bot/ to these
two modules (pyproject.toml), so the rest of worker/ may change without
reading the bot. A name the bot needs is added here, to its group."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from worker import arithmetic, compat, models, presets, redact, shape, summary, units
from worker import report as reports
from worker import spec as specs
from worker.catalog import LIVE_TIME_NOTE, PROCESSES, Workload
from worker.compat import show as compat_show
from worker.limits import MAX_BYTES
from worker.redact import text as redact_text
from worker.report import Report
from worker.sacct import NOT_ENDED
from worker.shape import REQUIRED, Most, Range
from worker.stats import FIXED_BOUND
from worker.units import duration, size

if TYPE_CHECKING:
    from worker import attempts, machine, offer, secrecy, trialuser
    from worker.agent import Agent
    from worker.client import Client
    from worker.signals import Signals

# The embedded worker (console, serve --local-worker), imported on first use so
# that a bot without one never loads the launcher.
_LATER = {"attempts": ("worker.attempts", None), "machine": ("worker.machine", None),
          "offer": ("worker.offer", None), "secrecy": ("worker.secrecy", None),
          "trialuser": ("worker.trialuser", None), "Agent": ("worker.agent", "Agent"),
          "Client": ("worker.client", "Client"), "Signals": ("worker.signals", "Signals")}

__all__ = [
    # What a trial is: /trial's words parsed and checked as the worker checks them.
    "specs", "Workload", "models", "presets", "PROCESSES", "LIVE_TIME_NOTE",
    # What a trial reports (trialbot.trial/1), its validator, the API's strict JSON.
    "reports", "Report", "MAX_BYTES", "shape", "REQUIRED", "Most", "Range",
    # A report said to people: its lines, bytes and seconds, the spread bound.
    "summary", "units", "size", "duration", "FIXED_BOUND",
    # Model arithmetic (parameters, weights, KV cache) and Slurm's unended states.
    "arithmetic", "NOT_ENDED",
    # A repository read without running it: its pins and device needs (docs/compat.md).
    "compat", "compat_show",
    # Secrets kept out of logs and messages.
    "redact", "redact_text",
    # The embedded worker, loaded on first use (_LATER).
    "attempts", "machine", "offer", "secrecy", "trialuser", "Agent", "Client", "Signals",
]

def __getattr__(name: str) -> object:
    """An embedded worker's part, imported when first asked for (PEP 562).
    The TYPE_CHECKING imports above give mypy each one's own type; `object`
    here makes any other name an error to use, not an unchecked one."""
    try:
        module, attr = _LATER[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    found = importlib.import_module(module)
    value = found if attr is None else getattr(found, attr)
    globals()[name] = value
    return value
