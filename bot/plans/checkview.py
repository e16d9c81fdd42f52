"""What a compatibility check (`/plan NAME check`, #34) says, and what it
gives the plan: the reply when it is asked, the answer posted when a worker
has read the repository (a verdict per GPU kind for the target and the
table's kinds, the platforms, what was read and what could not be), the
checklist items it fills, `show`'s line and the advice's facts. Pure."""
from __future__ import annotations

import datetime as dt

from bot.blocks import chunks, reply, section
from bot.fits import compat as fits
from bot.fits.gpus import GpuNameError
from bot.states import Json
from worker.api import compat, compat_show
from worker.i18n import N_, _

R = compat.report
# Pins that say which framework a repository is written for, in this order.
FRAMEWORKS = ("torch", "tensorflow", "jax", "transformers", "accelerate", "deepspeed", "peft",
              "vllm", "flash-attn", "triton", "xformers", "bitsandbytes")
PINS_SHOWN = 8
ORDER = (fits.RUNS, fits.CHANGES, fits.CANNOT)
UNREAD_SHOWN = 5
UNREAD_WHY = {
    "syntax": N_("not Python 3 (a syntax error): read it by hand, or check a commit where "
                 "it parses"),
    "encoding": N_("not UTF-8 text: read it by hand"),
    "dynamic_import": N_("a module imported by a computed name: look at what it can import"),
    "computed": N_("dependencies computed by code: read the file itself"),
    "format": N_("a dependency file that does not parse: fix it, or read its pins by hand"),
    "large": N_("a Python file over 2 MB: read it by hand"),
}


def report_of(result: Json | None) -> compat.Report | None:
    return compat.report.from_json(result["report"]) if result and "report" in result else None


def target_of(plan: Json) -> fits.Target | None:
    """The plan's target as a verdict's kind: its GPU, or a Mac for platform mps."""
    facts = plan["facts"]
    if facts.get("platform") == "mps":
        return fits.target("mac")
    if not facts.get("gpu"):
        return None
    try:
        return fits.target(facts["gpu"])
    except (GpuNameError, ValueError, KeyError):
        return None


def asked(plan: Json, check: Json, workers: list[str], online: list[str]) -> Json:
    values = dict(id=check["id"], plan=plan["name"], repo=check["repo"],
                  commit=check["commit_asked"] or _("its default branch"))
    text = _("Compatibility check C{id} of *{plan}*: {repo} at {commit} is asked of a worker; "
             "it fetches the repository and reads it without running anything, and the "
             "answer is posted in this channel.", **values)
    if not online:
        text += " " + _("No worker that reads repositories is online now ({workers} "
                        "registered): it waits for one.", workers=", ".join(workers))
    return reply(text)


def fills(facts: Json, report: compat.Report, verdicts: tuple[fits.Verdict, ...]) -> Json:
    """`framework` (the framework pins) and `needs_cuda` (yes when neither a
    Mac nor a CPU can run it), for the items still empty."""
    out: Json = {}
    pins = sorted((p for p in report.pins if p.name in FRAMEWORKS and not p.group),
                  key=lambda p: FRAMEWORKS.index(p.name))
    if pins:
        files = sorted({p.file for p in pins})
        out["framework"] = _("{pins} (from {files}, the compatibility check)",
                             pins=", ".join(dict.fromkeys(p.name + p.spec for p in pins)),
                             files=", ".join(files))
    elsewhere = [v for v in verdicts if v.target.platform in ("mps", "cpu")]
    if elsewhere and report.python_files:
        out["needs_cuda"] = ("yes" if all(v.status == fits.CANNOT for v in elsewhere)
                             else "no")
    return {k: v for k, v in out.items() if facts.get(k) in (None, "")}


def _kinds(verdicts: tuple[fits.Verdict, ...]) -> list[str]:
    """Kinds with the same verdict for the same reasons share one entry."""
    groups: dict[tuple[str, tuple[fits.Reason, ...]], list[str]] = {}
    for v in verdicts:
        groups.setdefault((v.status, v.reasons), []).append(v.target.name)
    out = []
    for (status, reasons), names in groups.items():
        out.append(f"• {', '.join(names)}: *{fits.status_word(status)}*")
        out += [_reason_line(r) for r in reasons]
    return out


def _reason_line(reason: fits.Reason) -> str:
    where = ", ".join(f"`{w}`" for w in reason.where)
    if reason.more:
        where += _(" and {count} more", count=reason.more)
    return f"    ◦ {reason.text}" + (f" [{where}]" if where else "")


def _platforms(verdicts: tuple[fits.Verdict, ...]) -> str:
    best: dict[str, str] = {}
    for v in verdicts:
        now = best.get(v.target.platform)
        if now is None or ORDER.index(v.status) < ORDER.index(now):
            best[v.target.platform] = v.status
    names = {"cuda": "CUDA", "rocm": "ROCm", "mps": "MPS", "cpu": "CPU"}
    return "; ".join(f"{names[p]}: {fits.status_word(s)}" for p, s in best.items())


def _read(report: compat.Report) -> list[str]:
    pins = [f"`{p.name}{p.spec}`" for p in report.pins if not p.group][:PINS_SHOWN]
    more = len([p for p in report.pins if not p.group]) - len(pins)
    out = [_("*Read*: {n} Python files; dependency files {files}; pins {pins}",
             n=report.python_files, files=", ".join(f"`{f}`" for f in report.dependency_files)
             or _("none"), pins=(", ".join(pins) + (_(" and {count} more", count=more)
                                                    if more > 0 else "")) or _("none"))]
    if report.requires_python:
        out[0] += "; " + _("Python {versions}", versions=", ".join(report.requires_python))
    out += compat_show.resolution(report.resolution)
    if report.unread:
        out.append(_("*Not read* ({n}; what to do with each):", n=len(report.unread)))
        for u in report.unread[:UNREAD_SHOWN]:
            where = f"{u.file}:{u.line}" if u.line else (u.file or ".")
            why = _(UNREAD_WHY.get(u.why, u.why))
            out.append(f"• `{where}`: {why}" + (f" ({u.detail[:120]})" if u.detail else ""))
        if len(report.unread) > UNREAD_SHOWN:
            out.append(_("• and {count} more", count=len(report.unread) - UNREAD_SHOWN))
    return out


def answered(check: Json, plan: Json, result: Json, filled: Json) -> Json:
    """The answer posted in the plan's channel, as an outbox message."""
    report = report_of(result)
    if report is None or not report.python_files:
        text = failed(check, plan, result)
    else:
        text = "\n".join(_verdict_lines(check, plan, result, report, filled))
    return {"channel": check["channel"], "kind": "note", "text": text, "user": check["user"],
            "blocks": [section(part) for part in chunks(text)]}


def failed(check: Json, plan: Json, result: Json) -> str:
    """Why a check read nothing, by name, with what to do."""
    values = dict(id=check["id"], plan=plan["name"], repo=check["repo"],
                  commit=check["commit_asked"] or "HEAD")
    head = _(":x: Compatibility check C{id} of *{plan}* read nothing:", **values)
    error = result.get("error") or {}
    detail = str(error.get("message", ""))[-600:]
    why = {
        "fetch": _("the repository {repo} could not be fetched ({detail}). Check the URL or "
                   "path and that the workers can reach it, then ask again: `/plan {plan} "
                   "check repo=https://github.com/owner/name`", detail=detail, **values),
        "commit": _("commit `{commit}` is not in {repo}. Give a commit hash or tag that `git "
                    "log` shows there: `/plan {plan} check commit=e2a5d20`", **values),
        "timeout": _("fetching {repo} took longer than the worker allows ({detail}); ask again "
                     "(a second try finds what was fetched)", detail=detail, **values),
    }.get(str(error.get("why")))
    if why is None and report_of(result) is not None:
        why = _("{repo} at `{commit}` has no Python code, so there is nothing to read for a "
                "GPU. Check the repository and commit: `/plan {plan} check repo=URL "
                "commit=SHA`", **dict(values, commit=str(result.get("commit", ""))[:12]))
    return f"{head} {why or detail}"


def _verdict_lines(check: Json, plan: Json, result: Json, report: compat.Report,
                   filled: Json) -> list[str]:
    verdicts = fits.verdicts(report)
    target = target_of(plan)
    values = dict(id=check["id"], plan=plan["name"], repo=check["repo"],
                  commit=str(result["commit"])[:12])
    out = [_(":mag: Compatibility check C{id} of *{plan}*: {repo} at `{commit}`, read without "
             "running it (fetched in {fetch} s{cached}, read in {read} s).",
             fetch=result.get("fetch_s"), read=result.get("read_s"),
             cached=_(", from the cache") if result.get("cached") else "", **values)]
    if target is not None:
        mine = fits.verdict(report, target)
        out.append(_("*Target {kind}*: {verdict}", kind=target.name,
                     verdict=fits.status_word(mine.status)))
        out += [_reason_line(r) for r in mine.reasons]
    else:
        out.append(_("*Target*: none named (`/plan {plan} set gpu=H100`); every kind below.",
                     plan=plan["name"]))
    out += [_("*Per GPU kind*:"), *_kinds(verdicts)]
    out.append(_("*Platforms*: {platforms}", platforms=_platforms(verdicts)))
    out += _read(report)
    if filled:
        out.append(_("*Filled in the checklist* (it was empty; a value a person sets is never "
                     "overwritten): {items}", items="; ".join(f"{k} = {v}"
                                                              for k, v in filled.items())))
    out.append(_("Static reading cannot see a kernel chosen at run time or a dependency's own "
                 "needs: a short trial on {kind} (rule 1 of the advice) is what confirms it.",
                 kind=target.name if target else _("the target GPU")))
    return out


def show_line(plan: Json, check: Json | None) -> str | None:
    """`/plan NAME show`'s line on the latest check: its commit, date and the
    verdict for the target; all of it is in its answer in the channel."""
    report = report_of(check.get("result")) if check else None
    if check is None or report is None:
        return None
    target = target_of(plan)
    verdict = (_("{kind} {verdict}", kind=target.name,
                 verdict=fits.status_word(fits.verdict(report, target).status))
               if target else _("no target GPU named"))
    day = dt.datetime.fromtimestamp(check["finished"], dt.timezone.utc).date().isoformat()
    return _("*Compatibility* (check C{id}, `{commit}`, {day}): {verdict}. Every kind and why: "
             "its answer in this channel, or `/plan {plan} check` again.", id=check["id"],
             commit=str(check["commit_read"])[:12], day=day, verdict=verdict, plan=plan["name"])


def advice_facts(plan: Json, check: Json | None) -> Json | None:
    """What the advice reads of the latest check: the verdict for the target,
    the kinds that can run it, and a Mac's evidence."""
    report = report_of(check.get("result")) if check else None
    if check is None or report is None:
        return None
    verdicts = fits.verdicts(report)
    target = target_of(plan)
    mine = fits.verdict(report, target) if target else None
    mac = next(v for v in verdicts if v.target.platform == "mps")
    return {"id": check["id"], "commit": str(check["commit_read"])[:12],
            "target": target.name if target else None,
            "status": mine.status if mine else None,
            "why": [r.text + (f" [{', '.join(r.where)}]" if r.where else "")
                    for r in (mine.reasons if mine else ()) if r.status == fits.CANNOT],
            "compatible": [v.target.name for v in verdicts
                           if v.status != fits.CANNOT and v.target.platform in ("cuda", "rocm")],
            "mac": mac.status,
            "mac_evidence": [w for r in mac.reasons for w in r.where][:fits.SHOWN]}
