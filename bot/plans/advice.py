"""Rent/buy guidance: the ordered rules of docs/design.md §4 applied to a plan's facts.
Pure. The first rule that fires answers; a rule that needs a fact nobody gave
stops the walk and asks for it, instead of guessing."""
from __future__ import annotations

import datetime as dt

from bot.fits import depth, gpus
from bot.plans import estimate, prices
from bot.plans import money as codes

RULES = {
    1: "Code not yet run successfully on the target environment",
    2: "Work concentrated in a period, later use uncertain",
    3: "Long, steady, fixed workload",
    4: "Code depends on CUDA, the target is not a CUDA platform",
    5: "Environment or workload not fixed, or peak memory never measured",
}


def facts_of(plan: dict, reports: list[dict], price_list: list[dict], total_hours: float,
             prep_hours: float) -> dict:
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
            "total_hours": total_hours, "prep_hours": prep_hours}


def advise(fx: dict, today: dt.date) -> dict:
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
                "answer": "Nothing stands in the way of renting for the estimated hours: the "
                          "code ran on the target, memory is measured, the plan is locked and "
                          "no buy case applies. Rent the target GPU for the plan's blocks.",
                "also": [], "missing": []}
    answer["also"] = also
    return answer


def _summary(fx: dict) -> list[str]:
    return [f"target {fx['target']}", f"trials on target: {', '.join(fx['on_target']) or 'none'}",
            f"plan {'locked' if fx['fixed'] else 'not locked'}"]


def _rule1(fx, today):
    if not fx["target"]:
        return {"missing": ["the target GPU kind: `/plan NAME set gpu=H100` (or gpu=cpu)"]}
    if fx["on_target"]:
        return {"fires": False}
    seen = ", ".join(fx["envs"]) or "no successful trial at all"
    return {"fires": True,
            "facts": [f"target {fx['target']}", f"the plan's trials ran on: {seen}"],
            "answer": f"Rent no hardware for the full experiment yet. Run a representative "
                      f"trial on a {fx['target']} first (`/trial ...` on a worker with that "
                      "GPU) and estimate the blocks from it."}


def _rule2(fx, today):
    missing = []
    if not fx["pattern"]:
        missing.append("whether the work is bunched in one period or steady: "
                       "`set pattern=concentrated` or `set pattern=steady`")
    if fx["pattern"] == "concentrated" and not fx["later_use"]:
        missing.append("whether the GPUs have a use afterwards: `set later_use=uncertain` or "
                       "`set later_use=planned`")
    if missing:
        return {"missing": missing}
    if fx["pattern"] == "concentrated" and fx["later_use"] == "uncertain":
        return {"fires": True,
                "facts": ["pattern concentrated", "later use uncertain",
                          f"estimate {fx['total_hours']:.4g} GPU-h, of which prep "
                          f"{fx['prep_hours']:.4g} h"],
                "answer": "Rent, for that period only. Rent the trial stage and the main run "
                          "separately; each rental session pays the set-up again "
                          f"({fx['prep_hours']:.4g} GPU-h of prep in this plan as estimated; "
                          "`set rental=per-block` counts it per block)."}
    return {"fires": False}


def _rule3(fx, today):
    # A buy decision is long-term: not while rule 4 or 5 stands in its way.
    blocked = (not fx["peak_on_target"]
               or (fx["needs_cuda"] == "yes" and fx["platform"] not in (None, "cuda")))
    if fx["pattern"] != "steady" or not fx["fixed"] or blocked:
        return {"fires": False}
    missing = []
    if not fx["period"]:
        missing.append("how long the steady work lasts: `set period=6mo`")
    if fx["utilization"] is None:
        missing.append("how busy an owned GPU would be: `set utilization=0.6`")
    p = fx["prices"]
    for kind, how in (("rent", f"/plan price {fx['target']} 2.49/h"),
                      ("buy", f"/plan price {fx['target']} buy=30000"),
                      ("power", f"/plan price {fx['target']} power=0.7kW"),
                      ("electricity", "/plan price electricity 0.12/kWh")):
        if p[kind] is None:
            missing.append(f"a confirmed {kind} figure: `{how} source=... date=YYYY-MM-DD` "
                           "(the numbers here only show the form)")
    money = [p[k] for k in ("rent", "buy", "resale", "electricity") if p.get(k)]
    if len({codes.code(m["currency"]) for m in money}) > 1:  # never converted
        missing.append("the prices in one currency: rent, buy, resale and electricity were "
                       "given in " + ", ".join(sorted({codes.code(m["currency"]) or "(none)"
                                                       for m in money}))
                       + "; record them again in one")
    if p["buy"] and p["resale"] and p["resale"]["value"] >= p["buy"]["value"]:
        missing.append(f"a resale value below the purchase price (resale {p['resale']['value']:g} "
                       f"≥ buy {p['buy']['value']:g}); check the figures")
    if missing:
        return {"missing": missing, "facts": ["pattern steady", "plan locked"]}
    be = prices.breakeven(p["buy"], p["resale"], p["rent"], p["power"], p["electricity"],
                          fx["utilization"])
    used = [prices.cited(p[k], today) for k in ("rent", "buy", "resale", "power", "electricity")
            if p[k]]
    if not p["resale"]:
        used.append("no confirmed resale value: taken as 0")
    if be["hours"] is None:
        verdict = f"Rent: {be['why']}."
    else:
        buy = be["days"] <= fx["period"]
        verdict = (f"Break-even after {be['hours']:,.0f} GPU-hours, {be['days']:,.0f} days at "
                   f"{fx['utilization']:.0%} utilisation; the work lasts {fx['period']:.0f} "
                   f"days, so {'buying pays off' if buy else 'renting is cheaper'}"
                   " (operations and idle periods of owned hardware not included).")
    return {"fires": True, "breakeven": be,
            "facts": ["pattern steady", f"period {fx['period']:.0f} days", "plan locked",
                      *used],
            "answer": "Compare buying and renting. H = (hardware − resale) / (rent per h − "
                      "power per h), days = H / (24 · utilisation). " + verdict}


def _rule4(fx, today):
    if fx["needs_cuda"] is None:
        return {"missing": ["whether the code needs CUDA (its support matrix): "
                            "`set needs_cuda=yes` or `set needs_cuda=no`"]}
    if fx["needs_cuda"] == "no":
        return {"fires": False}
    if not fx["platform"]:
        return {"missing": ["the target platform: `set platform=cuda` (or rocm, mps, cpu, tpu)"]}
    if fx["platform"] == "cuda":
        return {"fires": False}
    return {"fires": True, "facts": ["the code needs CUDA", f"target platform {fx['platform']}"],
            "answer": "Secure a CUDA device and a compatible software stack first: the repo's "
                      "support matrix beats the device's name (a cloud Mac is not a CUDA box)."}


def _rule5(fx, today):
    reasons = []
    if not fx["fixed"]:
        reasons.append("the plan is not locked (environment and workload may still change): "
                       "`/plan NAME lock` when they are fixed")
    if not fx["peak_on_target"]:
        reasons.append(f"peak memory was never measured on {fx['target']}"
                       + (f" at full depth ({', '.join(map(str, fx['partial']))} ran part of "
                          "the model: their full-depth peak is a prediction)"
                          if fx.get("partial") else ""))
    if not reasons:
        return {"fires": False}
    return {"fires": True, "facts": reasons,
            "answer": "Make no long-term decision yet: plan and rent the trial stage only."}
