"""The worker's words that reach a reader through a report: a busy machine's
warning, the optimizer-state theory, where a model's config came from. The
worker runs in English and does not know the channel, so the report carries,
beside the English text, the message and its values: {"id": msgid, "values":
{...}} (docs/report-schema.md). The bot renders it in the channel's language;
an older report, or an id this code does not know, shows the English as
written. Pure and torch-free, like worker/spec.py."""
from __future__ import annotations

from worker import i18n
from worker.i18n import N_

# The busy-machine warning, one sentence per variant; {gpu} is the list of GPU findings.
CPU_BUSY = N_("busy machine: other processes used {others} of the CPU during the {phase} phase "
              "(up to {peak} over {span} s): these times are not the machine's own speed; "
              "re-run on a quiet machine")
CPU_STEAL_BUSY = N_("busy machine: other processes used {others} of the CPU during the {phase} "
                    "phase (up to {peak} over {span} s), and the hypervisor took {steal} "
                    "(steal): these times are not the machine's own speed; re-run on a quiet "
                    "machine")
CPU_GPU_BUSY = N_("busy machine: other processes used {others} of the CPU during the {phase} "
                  "phase (up to {peak} over {span} s); {gpu}: these times are not the "
                  "machine's own speed; re-run on a quiet machine")
CPU_STEAL_GPU_BUSY = N_("busy machine: other processes used {others} of the CPU during the "
                        "{phase} phase (up to {peak} over {span} s), and the hypervisor took "
                        "{steal} (steal); {gpu}: these times are not the machine's own speed; "
                        "re-run on a quiet machine")
GPU_BUSY = N_("busy GPU: {gpu}: these times are not the machine's own speed; re-run on a "
              "quiet machine")
# One GPU finding each (worker/probes/nvml.py).
GPU_OTHERS = N_("{n} other process(es) on GPU {index} holding {gib} GiB")
GPU_SLOWED = N_("GPU {index} clocks slowed ({reasons})")

# llm-train's optimizer states, in theory (worker/workloads/llm_train.py).
THEORY = N_("AdamW keeps exp_avg and exp_avg_sq in fp32: 8 bytes/param")
THEORY_ZERO = N_("AdamW keeps exp_avg and exp_avg_sq in fp32: 8 bytes/param, divided over "
                 "{world} ranks by ZeRO-1")
# Where an hf-* trial's config came from (worker/models.py), and its weights.
SOURCE_PRESET = N_("trialbot's copy of {source}'s config.json")
SOURCE_FILE = N_("{path} (the worker's --models {directory})")
SOURCE_HUB = N_("the Hugging Face hub's {name} config.json (config only)")
RANDOM_WEIGHTS = N_("random (from the config; nothing downloaded)")

KNOWN = frozenset({CPU_BUSY, CPU_STEAL_BUSY, CPU_GPU_BUSY, CPU_STEAL_GPU_BUSY, GPU_BUSY,
                   GPU_OTHERS, GPU_SLOWED, THEORY, THEORY_ZERO, SOURCE_PRESET, SOURCE_FILE,
                   SOURCE_HUB, RANDOM_WEIGHTS})


def message(msgid: str, /, **values) -> dict:
    """A message as a report carries it; `msgid` is one of KNOWN."""
    assert msgid in KNOWN, msgid
    return {"id": msgid, "values": values}


def english(note: dict) -> str:
    """The text the worker writes beside the message (the worker speaks English)."""
    with i18n.using("en"):
        return said(note) or ""


def text(english: str) -> str:
    """A report's text that is a message without values (RANDOM_WEIGHTS) in the
    language in use; any other text as written."""
    return i18n._(english) if english in KNOWN and "{" not in english else english


def said(note: object, fallback: str | None = None) -> str | None:
    """`note` in the language in use; `fallback` (the English the report carries)
    where it is absent or not one of KNOWN: a report is a worker's data, never a
    format string to trust."""
    if not isinstance(note, dict) or note.get("id") not in KNOWN:
        return fallback
    values = {}
    for key, value in (note.get("values") or {}).items():
        if isinstance(value, list):  # several findings, one placeholder
            parts = [said(v) for v in value]
            if None in parts:
                return fallback
            value = "; ".join(p for p in parts if p is not None)  # none is, as checked
        elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
            return fallback
        values[key] = value
    try:
        return i18n._(note["id"], **values)
    except (KeyError, IndexError, ValueError):  # values that do not fit the message
        return fallback
