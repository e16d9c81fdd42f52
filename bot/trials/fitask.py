"""`/trial fit S12 batch=32 gpu=H100`: a question to a finished sweep, asked in
its own channel (or by an admin anywhere), answered from its fit."""
from __future__ import annotations

from bot.blocks import reply, section
from bot.context import Context
from bot.fits import scaling, sweepview
from bot.fits.sweep import fit_sweep
from bot.states import Json
from bot.trials import parse, views
from bot.trials.job import ENDED
from worker.i18n import _, did_you_mean, sentences


def fit(ctx: Context, cmd: parse.Command, user: str, channel: str) -> Json:
    """`/trial fit S12 batch=32 gpu=H100`: ask a finished sweep, in its own channel."""
    assert cmd.sweep_id is not None  # parse gives `fit` its sweep
    jobs = ctx.store.sweep_jobs(cmd.sweep_id)
    if not jobs:
        return views.sweep_not_found(cmd.sweep_id)
    if ctx.hides(jobs[0]["channel"], user, channel):
        return reply(_(":lock: S{id} belongs to another channel; ask there (or an admin "
                       "can ask anywhere).", id=cmd.sweep_id))
    if any(j["status"] not in ENDED for j in jobs):
        return views.sweep_unfinished(cmd.sweep_id, jobs)
    result = fit_sweep([j["report"] for j in jobs])
    if result.get("kind") == "depth" and not result.get("error"):
        for key, value in cmd.params.items():
            if key != "layers":
                return reply(_(":x: `{key}={value}`: S{id} is a depth sweep; it answers "
                               "layers=N (e.g. `/trial fit S{id} layers=32 gpu=H100`).",
                               key=key, value=value, id=cmd.sweep_id))
    elif not result.get("error"):
        known = {result["variables"]["batch"], *result["variables"]["length"],
                 *result["defaults"]}
        for key, value in cmd.params.items():
            if key not in known:
                axes = [k for k in (result["variables"]["batch"], *result["variables"]["length"])
                        if k] or ["batch"]
                return reply(sentences(
                    _(":x: `{key}={value}`: sweep S{id} has no parameter `{key}`; ask with "
                      "{axes} (e.g. `/trial fit S{id} {axis}=32 gpu=H100`).", key=key,
                      value=value, id=cmd.sweep_id, axes=", ".join(axes), axis=axes[0]),
                    did_you_mean(key, [k for k in known if k], after=f"={value}")))
        held = _held_fixed(cmd, jobs, result)
        if held:
            return held
    answer = sweepview.sweep_answer(cmd.sweep_id, jobs, result, cmd.params, cmd.gpu)
    # A question with a config gets the chart with its prediction (the fit's own
    # chart was posted with the fit). An ephemeral answer holds no file: the chart
    # goes to the sweep's channel, or to the asker alone when an admin asks
    # elsewhere, so a sweep is never shown in a channel it does not belong to.
    drawn = sweepview.sweep_chart(cmd.sweep_id, channel, result, cmd.params) \
        if cmd.params else None
    if drawn:
        home = channel == jobs[0]["channel"]
        ctx.store.add_messages([dict(drawn, user=user, **({} if home else {"via": "dm"}))])
        ctx.notify()
        note = (_("The chart ({file}) is being uploaded to this channel.", file=drawn["file"])
                if home else
                _("The chart ({file}) comes to you in a direct message, since S{id} belongs to "
                  "another channel.", file=drawn["file"], id=cmd.sweep_id))
        answer = dict(answer, text=f"{answer['text']}\n{note}",
                      blocks=[*answer["blocks"][:49], section(note)])
    return answer



def _held_fixed(cmd: parse.Command, jobs: list[Json], result: Json) -> Json | None:
    """A recipe sweep answers only on what it varied (as /plan's sweep blocks do)."""
    if not result.get("recipe"):
        return None
    varied = scaling.swept(result)
    measured: Json = next((j["report"]["params"] for j in jobs if j.get("report")), {})
    for key, value in cmd.params.items():
        if key not in varied:
            return reply(_(":x: `{key}={value}`: sweep S{id} varied {swept}; {key} was "
                           "{measured} in every trial, so its fit says nothing about "
                           "{key}={value}. Ask with {words}.", key=key, value=value,
                           id=cmd.sweep_id, swept=", ".join(varied),
                           measured=measured.get(key), words=" ".join(
                               f"{k}=N" for k in varied)))
    return None
