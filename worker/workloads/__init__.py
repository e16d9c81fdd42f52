"""Built-in workloads. Each module exposes `run(params, trial)`; the child
process calls it inside `trial.phase(...)` blocks and it returns its results."""
from __future__ import annotations

import importlib

MODULES = {"llm-infer": "worker.workloads.llm_infer", "llm-train": "worker.workloads.llm_train",
           "hf-infer": "worker.workloads.hf_infer", "hf-train": "worker.workloads.hf_train"}


class Unsupported(Exception):
    """The worker cannot run this config at all (not a failure of the trial)."""


def load(name: str):
    return importlib.import_module(MODULES[name])
