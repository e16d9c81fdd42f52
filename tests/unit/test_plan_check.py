"""`/plan NAME check` (#34), its pure parts: the words read (and malformed
ones refused by name), the repository and commit a checklist names, the
checklist items a check fills (never a person's), the answer and `show`'s
line, and what the advice makes of it (a blocking warning, rule 4's kinds and
a Mac's evidence)."""
import datetime as dt

import pytest

from bot.fits import compat as fits
from bot.plans import advice, checkparse, checkview, views
from bot.plans.grammar import PlanError
from test_planner import facts
from worker import i18n
from worker.api import compat

R = compat.report
TODAY = dt.date(2026, 12, 4)
SHA = "e2a5d20" + "0" * 33


def parse(words):
    return checkparse.parse_check("snap", "check", words, TODAY).args


def flash_report(**kw):
    """SnapKV's case: flash_attn imported and its forward patched, pinned."""
    return R.Report(root="https://github.com/FasterDecoding/SnapKV", python_files=3, pins=(
        R.Pin("torch", "==2.1.2", "requirements.txt", 1),
        R.Pin("flash-attn", "==2.4.0", "requirements.txt", 3),
        R.Pin("pytest", "", "requirements.txt", 4, group="test")), needs=(
        R.Evidence(R.IMPORT, "flash_attn", "snap/monkeypatch.py", 1),
        R.Evidence(R.FA2_REQUEST, compat.code.PATCHES_FA2, "snap/monkeypatch.py", 5)),
        dependency_files=("requirements.txt",), **kw)


def a_plan(**facts_):
    return {"name": "snap", "channel": "C1", "facts": facts_}


def a_check(report, status="done"):
    return {"id": 3, "plan": "snap", "repo": report.root, "commit_asked": None, "user": "U1",
            "channel": "C1", "status": status, "finished": 1796342400.0,
            "commit_read": SHA, "result": {"commit": SHA, "report": report.as_json(),
                                           "fetch_s": 0.2, "read_s": 0.01, "cached": False}}


def test_repo_and_commit_are_read_and_malformed_ones_refused_with_an_example():
    assert parse(["repo=https://github.com/o/n", "commit=e2a5d20"]) == {
        "repo": "https://github.com/o/n", "commit": "e2a5d20"}
    assert parse(["repo=<https://github.com/o/n|github.com/o/n>"])["repo"] == \
        "https://github.com/o/n"  # Slack's link markup
    assert parse(["repo=github.com/o/n"])["repo"] == "https://github.com/o/n"
    assert parse(["repo=/srv/repos/snap", "commit=v1.2"])["commit"] == "v1.2"
    for bad in ("repo=--upload-pack=touch", "repo=relative/path", "repo=ftp://x/y",
                "repo=-uX@h:p"):  # scp-like, but git would read it as an option
        with pytest.raises(PlanError, match="not a repository git can fetch.*e.g. `/plan snap"):
            parse([bad])
    for bad in ("commit=a..b", "commit=-x", "commit=HEAD~1"):
        with pytest.raises(PlanError, match="is not a commit: give a commit hash"):
            parse([bad])
    with pytest.raises(PlanError, match="has no `branch`"):
        parse(["branch=main"])


def test_the_checklists_repo_gives_the_repository_and_its_commit():
    assert checkparse.from_checklist("https://github.com/o/n @ e2a5d20") == (
        "https://github.com/o/n", "e2a5d20")
    assert checkparse.from_checklist("https://github.com/o/n@e2a5d20") == (
        "https://github.com/o/n", "e2a5d20")
    assert checkparse.from_checklist("github.com/o/n, commit e2a5d20") == (
        "https://github.com/o/n", "e2a5d20")
    none = {"repo": None, "commit": None}
    assert checkparse.target(none, "https://github.com/o/n e2a5d20", "snap") == (
        "https://github.com/o/n", "e2a5d20")
    # Another repository given: the checklist's commit is not its commit.
    assert checkparse.target({"repo": "/srv/x", "commit": None}, "https://github.com/o/n "
                             "e2a5d20", "snap") == ("/srv/x", None)
    with pytest.raises(PlanError, match="has no repository to check.*set repo="):
        checkparse.target(none, None, "snap")
    with pytest.raises(PlanError, match="`the Medusa one`, which names no repository"):
        checkparse.target(none, "the Medusa one", "snap")


def test_a_check_fills_only_the_empty_items_and_needs_cuda_from_a_mac_and_a_cpu():
    report = flash_report()
    found = fits.verdicts(report)
    assert checkview.fills({}, report, found) == {
        "framework": "torch==2.1.2, flash-attn==2.4.0 (from requirements.txt, the "
                     "compatibility check)", "needs_cuda": "yes"}
    assert checkview.fills({"framework": "jax", "needs_cuda": "no"}, report, found) == {}
    plain = R.Report(root="x", python_files=2, needs=(R.Evidence(R.CUDA_CALL, ".cuda()",
                                                                 "run.py", 9),))
    assert checkview.fills({}, plain, fits.verdicts(plain)) == {"needs_cuda": "no"}


def test_the_answer_names_the_targets_verdict_every_kind_what_was_read_and_not():
    report = flash_report(unread=(R.Unread("setup.py", 12, "computed", "open(...)"),))
    check = a_check(report)
    msg = checkview.answered(check, a_plan(gpu="T4"), check["result"], {"needs_cuda": "yes"})
    text = msg["text"]
    assert msg["channel"] == "C1" and "Compatibility check C3 of *snap*" in text
    assert "*Target T4*: cannot run" in text and "`snap/monkeypatch.py:5`" in text
    assert "H100-80GB" in text and "MI300X" in text and "Mac" in text and "CPU" in text
    assert "*Platforms*: CUDA: runs as it is" in text and "CPU: cannot run" in text
    assert "`torch==2.1.2`" in text and "pytest" not in text  # an extra's pins aside
    assert "`setup.py:12`: dependencies computed by code: read the file itself" in text
    assert "needs_cuda = yes" in text and "a short trial on T4" in text
    with i18n.using("ko"):
        ko = checkview.answered(check, a_plan(gpu="T4"), check["result"], {})["text"]
    assert "*대상 T4*: 실행할 수 없습니다" in ko and "확인합니다" in ko


def test_a_check_that_read_nothing_says_why_and_what_to_do():
    check = a_check(flash_report(), status="failed")
    plan = a_plan()
    for why, words in (("fetch", "could not be fetched (fatal: no such repo). Check the URL"),
                       ("commit", "is not in https://github.com/FasterDecoding/SnapKV. Give"),
                       ("timeout", "took longer than the worker allows")):
        result = {"error": {"why": why, "message": "fatal: no such repo"}}
        assert words in checkview.failed(check, plan, result)
    empty = {"commit": SHA, "report": R.Report(root="x", python_files=0).as_json()}
    assert "`e2a5d2000000` has no Python code" in checkview.answered(check, plan, empty,
                                                                    {})["text"]


def test_show_names_the_latest_checks_commit_date_and_target_verdict():
    line = checkview.show_line(a_plan(gpu="A100-80GB"), a_check(flash_report()))
    assert line.startswith("*Compatibility* (check C3, `e2a5d2000000`, 2026-12-04): "
                           "A100-80GB runs as it is.")
    assert checkview.show_line(a_plan(), None) is None


def test_a_target_the_check_says_cannot_run_it_is_a_blocking_warning():
    check = checkview.advice_facts(a_plan(gpu="T4"), a_check(flash_report()))
    a = advice.advise(facts(target="T4", check=check), TODAY)
    assert a["blocking"] and "T4 cannot run this code" in a["blocking"][0]
    assert "H100-80GB" in a["blocking"][0] and "V100" not in a["blocking"][0]
    assert views.advice(a_plan(), a)["text"].startswith(":no_entry: *Blocking*:")
    fine = checkview.advice_facts(a_plan(gpu="H100"), a_check(flash_report()))
    assert advice.advise(facts(check=fine), TODAY)["blocking"] == []


def test_rule_4_names_the_compatible_kinds_and_a_macs_evidence():
    check = checkview.advice_facts(a_plan(platform="mps"), a_check(flash_report()))
    a = advice.advise(facts(target="Mac", platform="mps", on_target=["T1"], check=check),
                      TODAY)
    rule4 = next(x for x in [a, *a["also"]] if x["rule"] == 4)
    assert "found it can run on: H100-80GB" in rule4["answer"]
    assert "On a Mac it cannot run: `snap/monkeypatch.py:1`, `snap/monkeypatch.py:5`" in \
        rule4["answer"]
