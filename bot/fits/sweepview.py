"""Sweep messages: the fit posted when a sweep's last trial ends and the
answer to `/trial fit`, by the kind of sweep (batch and length: batchview;
depth: depthview). Pure."""
from __future__ import annotations

import logging

from bot.blocks import paragraphs, plain, section
from bot.fits import batchview, chart, depthview
from bot.fits.gpus import Gpu
from bot.states import Json
from worker.i18n import _

log = logging.getLogger("trialbot.sweeps")


def sweep_fit(sweep: int, jobs: list[Json], fit: Json) -> Json:
    """The message posted to the channel when a sweep's last trial ended."""
    parts = (depthview.sweep_parts(sweep, jobs, fit) if fit.get("kind") == "depth"
             else batchview.fit_parts(sweep, jobs, fit))
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": plain(parts),
            "blocks": paragraphs(parts)}


def sweep_answer(sweep: int, jobs: list[Json], fit: Json, params: Json,
                 gpu: Gpu | None = None) -> Json:
    """`/trial fit S12 ...`: the answer to one question, ephemeral."""
    parts = (depthview.answer_parts(sweep, jobs, fit, params.get("layers"), gpu)
             if fit.get("kind") == "depth" else
             batchview.answer_parts(sweep, jobs, fit, params, gpu))
    return {"response_type": "ephemeral", "text": plain(parts), "blocks": paragraphs(parts)}


def sweep_chart(sweep: int, channel: str, fit: Json, params: Json | None = None
                ) -> Json | None:
    """The fit's chart as a file for the channel (drawn now, like the digest's), or
    None when there is nothing to draw or drawing failed: the text says it all too."""
    if fit.get("error") or not fit.get("points"):
        return None
    try:
        png = chart.png(fit, sweep, params)
    except Exception:  # noqa: BLE001 - a chart is an extra; the fit's text stands
        log.exception("sweep S%s: the chart could not be drawn", sweep)
        return None
    asked = " ".join(f"{k}={v}" for k, v in (params or {}).items())
    text = (_("Sweep S{sweep} fit chart: measured points, the fitted line, the held-out point "
              "and the prediction at {asked} with its interval", sweep=sweep, asked=asked)
            if asked else
            _("Sweep S{sweep} fit chart: measured points, the fitted line, the held-out point",
              sweep=sweep))
    return {"channel": channel, "kind": "sweep-chart", "text": text,
            "file": f"S{sweep}-fit" + (f"-{asked.replace(' ', '-').replace('=', '')}"
                                       if asked else "") + ".png",
            "content": png}


def sweep_fit_failed(sweep: int, jobs: list[Json], exc: Exception) -> Json:
    error = f"{type(exc).__name__}: {exc}"
    text = _(":x: *Sweep S{sweep}* ({first}–{last}) ended, but its fit failed: {error}. The "
             "trials' own reports stand; `/trial fit S{sweep}` tries again.", sweep=sweep,
             first=jobs[0]["trial"], last=jobs[-1]["trial"], error=error)
    return {"channel": jobs[0]["channel"], "kind": "sweep", "text": text,
            "blocks": [section(text)]}
