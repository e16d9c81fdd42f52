"""The reader's report as lines a person reads (`trialbot-worker check PATH`)."""
from __future__ import annotations

from worker.compat import report as r
from worker.compat.report import Report, Resolution, Unread
from worker.i18n import N_, _

SHOWN = 25  # pins listed in text; --json lists them all

_KIND = {r.IMPORT: N_("imports"), r.EXTENSION: N_("builds a CUDA extension"),
         r.CUDA_SOURCE: N_("CUDA sources"), r.CUDA_ARCH: N_("kernels built for compute capability"),
         r.CUDA_CALL: N_("hard-coded `.cuda()`"), r.CUDA_DEVICE: N_("hard-coded CUDA device"),
         r.CUDA_ASSERT: N_("asserts CUDA is available"), r.BF16: N_("bfloat16"),
         r.FP8: N_("FP8"), r.FA2_REQUEST: N_("asks for FlashAttention-2"),
         r.MPS: N_("Apple MPS in the code"), r.ROCM: N_("ROCm named"),
         r.APPLE: N_("Apple named in the docs")}

_WHAT_TO_DO = {
    "syntax": N_("it does not parse as Python 3 (Python 2 code, or a template): the check "
                 "skipped it; run that file's code on the target to see what it needs"),
    "encoding": N_("it is not UTF-8 text: save it as UTF-8 to have it read"),
    "format": N_("it is not valid for its format: fix that line (a requirement as pip "
                 "reads it, e.g. `torch==2.1.2`) and check again"),
    "computed": N_("its dependencies are computed when it runs (not a literal list), so "
                   "they were not read: list them in requirements.txt or pyproject.toml"),
    "dynamic_import": N_("a module imported by a name computed at run time: what it loads "
                         "is not known until it runs"),
    "large": N_("over 2 MB, so not parsed (a generated file?)"),
    "unreadable": N_("it could not be opened"),
}


def text(report: Report) -> str:
    out = [_("Repository `{root}`: {count} Python files read.", root=report.root,
             count=report.python_files)]
    if not report.python_files:
        out.append(_("No Python code here (no .py file): this check reads Python "
                     "repositories; give the checkout's top folder, e.g. "
                     "`trialbot-worker check ./Medusa`."))
    out += _pins(report)
    out += resolution(report.resolution)
    out += _needs(report)
    out += _unread(report.unread)
    out.append(_("This is a static reading: a kernel chosen at run time and a dependency's own "
                 "requirements are not seen. A short trial on the target confirms it."))
    return "\n".join(out)


def _pins(report: Report) -> list[str]:
    if not report.dependency_files:
        return [_("Declared dependencies: no requirements*.txt, setup.py, setup.cfg, "
                  "pyproject.toml or environment.yml found.")]
    out = [_("Declared dependencies, from {files}:", files=", ".join(report.dependency_files))]
    out += [f"  requires-python {x}" for x in report.requires_python]
    for pin in report.pins[:SHOWN]:
        extra = f" [{pin.group}]" if pin.group else ""
        marker = f" ; {pin.marker}" if pin.marker else ""
        out.append(f"  {pin.name}{pin.spec or pin.url and ' @ ' + pin.url}{marker}{extra}  "
                   f"({pin.file}:{pin.line})")
    if len(report.pins) > SHOWN:
        out.append(_("  and {count} more (`--json` lists them all)",
                     count=len(report.pins) - SHOWN))
    out += [_("  package index: {url}", url=url) for url in report.indexes]
    return out


_WHY = {"python": N_("no wheel for Python {python}"),
        "platform": N_("no wheel for the platform {platform}"),
        "source_only": N_("no wheel for Python {python} on {platform}, only a source "
                          "distribution: it would be built there (not tried here)"),
        "no_version": N_("no such version on the index"),
        "not_found": N_("not on the index"),
        "conflict": N_("conflicts with another requirement"),
        "other": N_("uv could not resolve the file (its words below)"),
        "requires_python": N_("the repository's own `requires-python` excludes Python {python}"),
        "direct_reference": N_("a direct reference: fetched and built, so not resolved here"),
        "conda": N_("`conda`'s syntax: `conda` resolves it"),
        "poetry": N_("`Poetry`'s syntax (`^`, `~`), not pip's"),
        "extra": N_("an optional extra")}


def resolution(done: Resolution | None) -> list[str]:
    """Whether the pins resolved for the target, as lines (the bot's answer shows them too)."""
    if done is None:
        return []
    target = {"python": done.python, "platform": done.platform}
    if done.status == "no_resolver":
        return [_("Pins not resolved: uv is not installed on this worker; install it "
                  "(`pip install uv`) and check again.")]
    if done.status == "skipped":
        if done.detail == "timeout":
            return [_("Pins not resolved for Python {python} on {platform}: uv did not answer "
                      "in the time allowed; check again when the index answers faster.",
                      **target)] + _problems(done)
        return [_("Pins not resolved for Python {python} on {platform}: the package index "
                  "could not be reached ({detail}); check again where it can be.",
                  detail=done.detail, **target)] + _problems(done)
    if not done.files:
        return [_("Pins not resolved: no pin uv can read was found.")]
    out = [_("Pins resolved for Python {python} on {platform} by uv (nothing installed): "
             "{files}, {count} packages.", files=", ".join(done.files), count=done.resolved,
             **target) if done.status == "resolved" else
           _("Pins that do not resolve for Python {python} on {platform} (uv, nothing "
             "installed):", **target)]
    out += _problems(done)
    out += [_("  not given to uv: {pin} ({where}): {why}", pin=p.name,
              where=f"{p.file}:{p.line}", why=_(_WHY[p.why])) for p in done.left_out[:SHOWN]]
    return out


def _problems(done: Resolution) -> list[str]:
    target = {"python": done.python, "platform": done.platform}
    out = []
    for p in done.problems:
        where = f"{p.file}:{p.line}" if p.line else p.file
        name = f"{p.name}{p.spec} ({where}): " if p.name else f"{where}: "
        out.append(f"  {name}{_(_WHY[p.why], **target)}")
        out += [f"    uv: {p.detail}"] if p.detail else []
    return out


def _needs(report: Report) -> list[str]:
    if not report.needs:
        return [_("What the code needs from the device: nothing CUDA-specific found.")]
    out = [_("What the code needs from the device (guarded: only on some path):")]
    groups: dict[tuple[str, str, bool], list[str]] = {}
    for e in report.needs:
        detail = e.detail if e.kind in (r.IMPORT, r.EXTENSION, r.CUDA_ARCH, r.BF16) else ""
        groups.setdefault((e.kind, detail, e.guarded), []).append(e.where)
    for (kind, detail, guarded), places in groups.items():
        total = report.counts.get(kind + (":guarded" if guarded else ""), len(places))
        more = _(" and {count} more", count=total - len(places[:3])) \
            if not detail and total > 3 else ""
        mark = _(" (guarded)") if guarded else ""
        places = list(dict.fromkeys(places))
        out.append(f"  {_(_KIND[kind])}{' ' + detail if detail else ''}{mark}: "
                   f"{', '.join(places[:3])}{more}")
    return out


def _unread(unread: tuple[Unread, ...]) -> list[str]:
    if not unread:
        return []
    out = [_("Could not read:")]
    for u in unread:
        where = f"{u.file}:{u.line}" if u.line else (u.file or ".")
        out.append(f"  {where}: {_(_WHAT_TO_DO.get(u.why, u.why))}"
                   + (f" ({u.detail})" if u.detail else ""))
    return out
