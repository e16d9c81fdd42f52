"""Sweep messages: the fit posted when a sweep's last trial ends and the
answer to `/trial fit`, by the kind of sweep (batch and length: batchview;
depth: depthview). Pure."""
from __future__ import annotations

from bot.blocks import paragraphs, plain, section
from bot.fits import batchview, depthview


def sweep_fit(sweep: int, jobs: list[dict], fit: dict) -> dict:
    """The message posted to the channel when a sweep's last trial ended."""
    parts = (depthview.sweep_parts(sweep, jobs, fit) if fit.get("kind") == "depth"
             else batchview.fit_parts(sweep, jobs, fit))
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": plain(parts),
            "blocks": paragraphs(parts)}


def sweep_answer(sweep: int, jobs: list[dict], fit: dict, params: dict, gpu=None) -> dict:
    """`/trial fit S12 ...`: the answer to one question, ephemeral."""
    parts = (depthview.answer_parts(sweep, jobs, fit, params.get("layers"), gpu)
             if fit.get("kind") == "depth" else
             batchview.answer_parts(sweep, jobs, fit, params, gpu))
    return {"response_type": "ephemeral", "text": plain(parts), "blocks": paragraphs(parts)}


def sweep_fit_failed(sweep: int, jobs: list[dict], exc: Exception) -> dict:
    text = (f":x: *Sweep S{sweep}* ({jobs[0]['trial']}–{jobs[-1]['trial']}) ended, but its "
            f"fit failed: {type(exc).__name__}: {exc}. The trials' own reports stand; "
            f"`/trial fit S{sweep}` tries again.")
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": text,
            "blocks": [section(text)]}
