"""Rent/buy guidance: the ordered rules of docs/design.md §4 applied to a plan's facts.
Pure. The first rule that fires answers; a rule that needs a fact nobody gave
stops the walk and asks for it, instead of guessing."""
from __future__ import annotations

import datetime as dt

from bot.fits import depth, gpus
from bot.plans import estimate, prices
from bot.plans import money as codes
from bot.states import Json
from worker.i18n import N_, _

RULES = {  # shown translated: views.advice
    1: N_("Code not yet run successfully on the target environment"),
    2: N_("Work concentrated in a period, later use uncertain"),
    3: N_("Long, steady, fixed workload"),
    4: N_("Code depends on CUDA, the target is not a CUDA platform"),
    5: N_("Environment or workload not fixed, or peak memory never measured"),
}


def facts_of(plan: Json, reports: list[Json], price_list: list[Json], total_hours: float,
             prep_hours: float, missing: list[str] | None = None,
             check: Json | None = None) -> Json:
    """The facts the rules read. `missing`: per block measured off the target,
    the trial on the target it still lacks (bot/plans/footing.missing_trial);
    `check`: the latest compatibility check's (bot/plans/checkview.advice_facts)."""
    f = plan["facts"]
    target = f.get("gpu")
    on_target = [r for r in reports if gpus.matches_gpu(r, target)]
    # A partial-depth trial's full-depth peak is predicted, not measured.
    whole, partial = [], []
    for r in reports:
        if depth.partial(r):
            partial.append(r.get("trial"))
        else:
            whole.append(r)
    gpu_mem = [r for r in on_target if r in whole and (r["memory"].get("peak_allocated")
                                                       or r["memory"].get("process_used_peak"))]
    host_mem = [r for r in whole if r["memory"].get("host_rss_peak")]
    return {"target": target, "platform": f.get("platform"), "pattern": f.get("pattern"),
            "period": f.get("period"), "later_use": f.get("later_use"),
            "needs_cuda": f.get("needs_cuda"), "utilization": f.get("utilization"),
            "fixed": bool(plan.get("locked")), "trials": len(reports),
            "on_target": [r.get("trial") for r in on_target], "partial": partial,
            "peak_on_target": bool(gpu_mem) or (target or "").lower() == "cpu" and bool(host_mem),
            "envs": sorted({estimate.env_kind(r) for r in reports}),
            "prices": {k: prices.find(price_list, "electricity" if k == "electricity" else target,
                                      k)
                       for k in ("rent", "buy", "resale", "power", "electricity")},
            "total_hours": total_hours, "prep_hours": prep_hours,
            "missing_trials": list(missing or []), "check": check}


def advise(fx: Json, today: dt.date) -> Json:
    """The first rule that fires (or the facts it lacks), the others that fire,
    and `blocking`: what stands in the way whatever the rules say (a target
    the compatibility check says cannot run the code)."""
    return dict(_walk(fx, today), blocking=blocking(fx))


def blocking(fx: Json) -> list[str]:
    check = fx.get("check")
    if not check or check["status"] != "cannot":
        return []
    other = ", ".join(check["compatible"]) or _("none of the table's kinds")
    return [_("The compatibility check C{id} (commit `{commit}`) says {gpu} cannot run this "
              "code: {why}. Kinds it can run on: {kinds}. Do not rent {gpu} for it; change "
              "the target (`/plan NAME set gpu=...`) or the code, and check again.",
              id=check["id"], commit=check["commit"], gpu=check["target"],
              why="; ".join(check["why"]), kinds=other)]


def _walk(fx: Json, today: dt.date) -> Json:
    answer = None
    also = []
    for n, check in ((1, _rule1), (2, _rule2), (3, _rule3), (4, _rule4), (5, _rule5)):
        result = check(fx, today)
        if result.get("missing") and answer is None:
            return {"rule": None, "undecided": n, "title": RULES[n], "missing": result["missing"],
                    "facts": result.get("facts", []), "also": []}
        if result.get("fires"):
            entry = {"rule": n, "title": RULES[n], **result}
            if answer is None:
                answer = entry
            else:
                also.append(entry)
    if answer is None:
        return {"rule": None, "title": "no rule fired", "facts": _summary(fx),
                "answer": _("Nothing stands in the way of renting for the estimated hours: the "
                            "code ran on the target, memory is measured, the plan is locked and "
                            "no buy case applies. Rent the target GPU for the plan's blocks."),
                "also": [], "missing": []}
    answer["also"] = also
    return answer


def _summary(fx: Json) -> list[str]:
    return [_("target {gpu}", gpu=fx["target"]),
            _("trials on target: {trials}", trials=", ".join(fx["on_target"]) or _("none")),
            _("plan locked") if fx["fixed"] else _("plan not locked")]


def _rule1(fx: Json, today: dt.date) -> Json:
    if not fx["target"]:
        return {"missing": [_("the target GPU kind: `/plan NAME set gpu=H100` (or gpu=cpu)")]}
    missing = fx.get("missing_trials") or []
    if fx["on_target"] and missing:  # some blocks' hours are another device's
        return {"fires": True,
                "facts": [_("target {gpu}", gpu=fx["target"]),
                          _("trials on target: {trials}", trials=", ".join(fx["on_target"]))],
                "answer": _("Rent no hardware for the blocks measured on another device yet: "
                            "their hours are not hours on {gpu} and are left out of the total. "
                            "Run a short trial on a {gpu} for each and re-add the block from "
                            "it:", gpu=fx["target"]) + "".join(f"\n• {m}" for m in missing)}
    if fx["on_target"]:
        return {"fires": False}
    seen = ", ".join(fx["envs"]) or _("no successful trial at all")
    return {"fires": True,
            "facts": [_("target {gpu}", gpu=fx["target"]),
                      _("the plan's trials ran on: {envs}", envs=seen)],
            "answer": _("Rent no hardware for the full experiment yet. Run a representative "
                        "trial on a {gpu} first (`/trial ...` on a worker with that GPU) and "
                        "estimate the blocks from it.", gpu=fx["target"])
            + "".join(f"\n• {m}" for m in missing)}


def _rule2(fx: Json, today: dt.date) -> Json:
    missing = []
    if not fx["pattern"]:
        missing.append(_("whether the work is bunched in one period or steady: "
                         "`set pattern=concentrated` or `set pattern=steady`"))
    if fx["pattern"] == "concentrated" and not fx["later_use"]:
        missing.append(_("whether the GPUs have a use afterwards: `set later_use=uncertain` or "
                         "`set later_use=planned`"))
    if missing:
        return {"missing": missing}
    if fx["pattern"] == "concentrated" and fx["later_use"] == "uncertain":
        total, prep = f"{fx['total_hours']:.4g}", f"{fx['prep_hours']:.4g}"
        return {"fires": True,
                "facts": [_("pattern concentrated"), _("later use uncertain"),
                          _("estimate {total} GPU-h, of which prep {prep} h", total=total,
                            prep=prep)],
                "answer": _("Rent, for that period only. Rent the trial stage and the main run "
                            "separately; each rental session pays the set-up again ({prep} "
                            "GPU-h of prep in this plan as estimated; `set rental=per-block` "
                            "counts it per block).", prep=prep)}
    return {"fires": False}


def _rule3(fx: Json, today: dt.date) -> Json:
    # A buy decision is long-term: not while rule 4 or 5 stands in its way.
    blocked = (not fx["peak_on_target"]
               or (fx["needs_cuda"] == "yes" and fx["platform"] not in (None, "cuda")))
    if fx["pattern"] != "steady" or not fx["fixed"] or blocked:
        return {"fires": False}
    missing = []
    if not fx["period"]:
        missing.append(_("how long the steady work lasts: `set period=6mo`"))
    if fx["utilization"] is None:
        missing.append(_("how busy an owned GPU would be: `set utilization=0.6`"))
    p = fx["prices"]
    for kind, how in (("rent", f"/plan price {fx['target']} 2.49/h"),
                      ("buy", f"/plan price {fx['target']} buy=30000"),
                      ("power", f"/plan price {fx['target']} power=0.7kW"),
                      ("electricity", "/plan price electricity 0.12/kWh")):
        if p[kind] is None:
            missing.append(_("a confirmed {kind} figure: `{how} source=... date=YYYY-MM-DD` "
                             "(the numbers here only show the form)", kind=kind, how=how))
    money = [p[k] for k in ("rent", "buy", "resale", "electricity") if p.get(k)]
    if len({codes.code(m["currency"]) for m in money}) > 1:  # never converted
        missing.append(_("the prices in one currency: rent, buy, resale and electricity were "
                         "given in {currencies}; record them again in one",
                         currencies=", ".join(sorted({codes.code(m["currency"]) or _("(none)")
                                                      for m in money}))))
    if p["buy"] and p["resale"] and p["resale"]["value"] >= p["buy"]["value"]:
        missing.append(_("a resale value below the purchase price (resale {resale} ≥ buy "
                         "{buy}); check the figures", resale=f"{p['resale']['value']:g}",
                         buy=f"{p['buy']['value']:g}"))
    if missing:
        return {"missing": missing, "facts": [_("pattern steady"), _("plan locked")]}
    be = prices.breakeven(p["buy"], p["resale"], p["rent"], p["power"], p["electricity"],
                          fx["utilization"])
    used = [prices.cited(p[k], today) for k in ("rent", "buy", "resale", "power", "electricity")
            if p[k]]
    if not p["resale"]:
        used.append(_("no confirmed resale value: taken as 0"))
    if be["hours"] is None:
        verdict = _("Rent: {why}.", why=be["why"])
    else:
        values = dict(hours=f"{be['hours']:,.0f}", days=f"{be['days']:,.0f}",
                      utilization=f"{fx['utilization']:.0%}", period=f"{fx['period']:.0f}")
        verdict = (_("Break-even after {hours} GPU-hours, {days} days at {utilization} "
                     "utilisation; the work lasts {period} days, so buying pays off (operations "
                     "and idle periods of owned hardware not included).", **values)
                   if be["days"] <= fx["period"] else
                   _("Break-even after {hours} GPU-hours, {days} days at {utilization} "
                     "utilisation; the work lasts {period} days, so renting is cheaper "
                     "(operations and idle periods of owned hardware not included).", **values))
    return {"fires": True, "breakeven": be,
            "facts": [_("pattern steady"), _("period {days} days", days=f"{fx['period']:.0f}"),
                      _("plan locked"), *used],
            "answer": _("Compare buying and renting. H = (hardware − resale) / (rent per h − "
                        "power per h), days = H / (24 · utilisation).") + " " + verdict}


def _rule4(fx: Json, today: dt.date) -> Json:
    if fx["needs_cuda"] is None:
        return {"missing": [_("whether the code needs CUDA (its support matrix): "
                              "`set needs_cuda=yes` or `set needs_cuda=no`")]}
    if fx["needs_cuda"] == "no":
        return {"fires": False}
    if not fx["platform"]:
        return {"missing": [_("the target platform: `set platform=cuda` (or rocm, mps, cpu, "
                              "tpu)")]}
    if fx["platform"] == "cuda":
        return {"fires": False}
    answer = _("Secure a CUDA device and a compatible software stack first: the repo's "
               "support matrix beats the device's name (a cloud Mac is not a CUDA box).")
    check = fx.get("check")
    if check:
        answer += " " + _("The compatibility check C{id} (commit `{commit}`) found it can run "
                          "on: {kinds}.", id=check["id"], commit=check["commit"],
                          kinds=", ".join(check["compatible"]) or _("none of the table's kinds"))
        if fx["platform"] == "mps" and check["mac_evidence"]:
            evidence = ", ".join(f"`{w}`" for w in check["mac_evidence"])
            answer += " " + (_("On a Mac it cannot run: {evidence}.", evidence=evidence)
                             if check["mac"] == "cannot" else
                             _("On a Mac it runs only with changes: {evidence}.",
                               evidence=evidence))
    return {"fires": True, "facts": [_("the code needs CUDA"),
                                     _("target platform {platform}", platform=fx["platform"])],
            "answer": answer}


def _rule5(fx: Json, today: dt.date) -> Json:
    reasons = []
    if not fx["fixed"]:
        reasons.append(_("the plan is not locked (environment and workload may still change): "
                         "`/plan NAME lock` when they are fixed"))
    if not fx["peak_on_target"]:
        reasons.append(_("peak memory was never measured on {gpu} at full depth ({trials} ran "
                         "part of the model: their full-depth peak is a prediction)",
                         gpu=fx["target"], trials=", ".join(map(str, fx["partial"])))
                       if fx.get("partial") else
                       _("peak memory was never measured on {gpu}", gpu=fx["target"]))
    if not reasons:
        return {"fires": False}
    return {"fires": True, "facts": reasons,
            "answer": _("Make no long-term decision yet: plan and rent the trial stage only.")}
