"""A user's week with trialbot, through the console as a user types it (issue
#19): look-alike characters, case and units, plans corrected and their history,
prices by confirmation date, a tagged trial run off the target and off the lock,
figures that agree between show, review, export and the digest, and the same
plan read in Korean (`/plan settings lang=ko`). One console process, two small
trials."""
from __future__ import annotations

import json
import re

from test_console import run_console

NBSP = "\u00a0"
TRIAL = "gen=2 repeats=1 stability=0 malloc=glibc processes=1"
WEEK = [
    "/plan new ADKV gpu=h100-80gb platform=CUDA paper=“AdaKV: adaptive KV eviction”",
    "/plan adkv set inputs=“batch 8, prompt 4096” period=3w",
    f"/trial llm-infer batch=2 {TRIAL}",
    # 20000 runs: an estimate big enough that the actuals below stay under the
    # 1,000×-the-estimate check on a machine of any speed
    "/plan adkv block baseline runs=20000 trial=t1 note=‘which set?’",
    "/plan ADKV block compare runs=20 trial=T1",
    "/plan adkv lock",
    f"/trial llm-infer batch=1 {TRIAL} plan=adkv block=compare",
    f"/trial llm-infer batch＝1{NBSP}{TRIAL} plan=adkv block=compare gpu=any",
    "/plan adkv actual baseline hours=1",
    "/plan adkv actual baseline hours=90m",
    "/plan adkv actual baseline hours=1000000000",
    "/plan adkv actual baseline delete #1",
    "/plan price H100 $2.49/hr source=https://example.com/q date=2026-11-30",
    "/plan price h100-sxm $3.10/h source=old-quote date=2026-11-01",
    "/plan price H100 99999999999999/h source=x date=2026-11-30",
    "/plan price L4 ₩3,500/h source=q date=2026-11-30",
    "/plan price A100 2.10/h source=q date=2026-11-30",
    "/plan adkv show",
    "/plan adkv review",
    "/plan adkv history",
    "/plan adkv export",
    "/plan digest now",
    "/trial workers",
    "/trial status t１",
    "/plan adkv set scope=“한국어 범위: 128K 문맥”",
    "/plan settings lang=ko",
    "/plan adkv show",
    "/plan adkv review",
    "/trial llm-infer batch=0",
    "/plan settings lang=",
]


def test_a_users_week(tmp_path):
    done = run_console(tmp_path, WEEK)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Traceback" not in out + done.stderr
    # Look-alike input: smart quotes are quotes, canonical names and words are echoed.
    assert ("Plan *adkv* started with gpu=H100-80GB, platform=cuda, paper=AdaKV: adaptive KV "
            "eviction") in out
    assert "set inputs=batch 8, prompt 4096" in out and "period=3 weeks (21 days)" in out
    assert "Next: `/plan adkv set gpu=" not in out  # nothing asked twice
    # A tagged trial on a box without the target GPU: refused, with the override named...
    assert "No worker matches `gpu=H100-80GB`" in out and "`gpu=any` to run on any worker" in out
    # ...which runs it, echoed in plain words, warned as off the target and off the lock.
    queued = re.search(r"Queued as \*T2\*[^`]*`([^`]*)`", out).group(1)
    assert queued.startswith("llm-infer batch=1 gen=2 ") and "＝" not in queued
    assert "gpu=any: this trial may run on any worker, off plan adkv's target H100-80GB" in out
    assert "Not comparable with plan adkv's lock of" in out and "(batch 2 → 1)" in out
    # Actuals add up in the open, and a correction says what is left.
    assert "now has 2 recorded actual(s), 2.5 GPU-h in all" in out
    assert "1,000,000,000 hours is more than 1,000,000" in out
    assert "now has 1 recorded actual(s), 1.5 GPU-h in all" in out
    # Prices: the one confirmed latest applies, whatever the order they were entered.
    assert "Recorded P1: H100-80GB rent $2.49 per GPU-hour" in out
    assert "Recorded P2: H100-80GB rent $3.1 per GPU-hour" in out and "STALE" in out
    assert "1e+14 is too much to be real" in out
    assert "Recorded P3: L4 rent ₩3500 per GPU-hour" in out
    assert "`A100` is ambiguous" in out and "A100-40GB (40 GB), A100-80GB (80 GB)" in out
    show = section(out, "*Plan adkv* (locked", "*Plan adkv*: estimate against actual")
    assert "cost at H100-80GB rent $2.49 per GPU-hour (P1, source: https://example.com/q" in show
    assert "T2 (compare): done — off target" in show and "kept out of the actual" in show
    assert ("*Record* (4 of 15 checklist items filled):\n• paper: AdaKV: adaptive KV eviction\n"
            "• inputs: batch 8, prompt 4096\n• gpu: H100-80GB\n• platform: cuda\n"
            "*Open checklist items*: baseline,") in show
    # The console's worker is a CPU box: every block's time is off the H100 target,
    # shown apart and out of the total, and an H100 actual is not compared with it.
    assert re.search(r"^compare\s+20×1\s+off target\s", show, re.M)
    assert re.search(r"^baseline\s+20000×1\s+off target\s", show, re.M)
    assert "measured on CPU" in show and "not a time on H100-80GB" in show
    review = section(out, "*Plan adkv*: estimate against actual", "*Plan adkv*: its changes")
    assert "estimated" not in review  # no block has a comparable actual
    assert "kept apart, T2: off target" in review
    assert "kept apart, actual 1.50 GPU-h on H100-80GB from manual #2, not compared" in review
    exported = json.loads((tmp_path / "trialbot-files" / "adkv-plan.json").read_text())
    assert exported["lock"] and exported["history"] and exported["settings"]
    blocks = {b["kind"]: b for b in exported["blocks"]}
    assert blocks["baseline"]["actual"] is None
    assert any("actual 1.50 GPU-h on H100-80GB" in k for k in blocks["baseline"]["kept_apart"])
    assert blocks["compare"]["kept_apart"][0].startswith("T2: off target")
    assert [(a["id"], a["gpu_hours"], a["by"]) for a in blocks["baseline"]["recorded_actuals"]] \
        == [(2, 1.5, "console")]
    md = (tmp_path / "trialbot-files" / "adkv-plan.md").read_text()
    assert "## Recorded actuals" in md and "baseline #2: 1.50 GPU-h, by hand, by <@console>" in md
    assert re.search(r"^total\s+n/a: no block measured on H100-80GB\s", show, re.M)
    assert "*adkv* (H100-80GB): estimate n/a GPU-h" in out  # the digest's plan line
    # The history holds who changed what, with the old value.
    history = section(out, "*Plan adkv*: its changes", "Exporting plan")
    assert "deleted actual baseline #1: hours=1" in history
    assert "set fact inputs: (not set) → batch 8, prompt 4096" in history
    assert "CPU cores" in out and "? CPU cores" not in out
    assert "*T1*" in section(out, "/trial status", "") or "T1 llm-infer ok" in out
    assert "set scope=한국어 범위: 128K 문맥" in out  # Korean in values, unchanged

    # The same plan read in Korean: the same figures, ids and commands, no English prose.
    ko = section(out, "이 채널의 언어: 한국어 (`ko`)", "This channel's language: English")
    ko_show = section(ko, "*계획 adkv*(", "*계획 adkv*: 추정치 대 실측치")
    assert re.search(r"^compare\s+20×1\s+대상 밖\s", ko_show, re.M)
    assert re.search(r"^합계\s+해당 없음: H100-80GB에서 측정한 블록이 없음\s", ko_show, re.M)
    assert "비용 기준: H100-80GB rent $2.49 GPU-시간당 (P1, 출처: https://example.com/q" in ko_show
    assert "T2 (compare): 완료 — 대상 외" in ko_show
    assert "*남은 체크리스트 항목*" in ko_show and "*경고*" in ko_show
    assert "*기록* (체크리스트 항목 15개 중 5개 채움):" in ko_show
    assert "• scope: 한국어 범위: 128K 문맥" in ko_show
    assert "H100-80GB에서의 실제 1.50 GPU-h(" in ko and "비교하지 않았습니다" in ko
    assert "따로 보관됨, T2: 대상 외" in ko
    assert "`batch=0`: batch은(는) 1부터 4096까지여야 합니다" in ko
    assert "아무것도 대기열에 추가하지 않았습니다." in ko
    for english in ("ran on", "Open checklist items", "Warnings", "estimate against actual",
                    "kept apart", "Nothing was", "must be from", "GPU-hours = measured"):
        assert english not in ko, english


def section(out: str, start: str, end: str) -> str:
    """The text from the first `start` after which `end` follows (end '' = to the end)."""
    i = out.index(start)
    j = out.index(end, i + len(start)) if end else len(out)
    return out[i:j]
