"""`/plan` in a Korean channel: replies, errors and refusals in Korean, with the
ids, numbers and backticked commands unchanged; an English channel beside it
stays English (docs/i18n.md). In-process, no worker."""
from __future__ import annotations

import datetime as dt

from bot import access, commands
from bot.app.runtime import context
from bot.plans import changes
from bot.store import Store
from worker import i18n

TODAY = dt.date(2026, 12, 1)


def _ctx(tmp_path):
    # anyone may run; nobody is an admin
    return context(Store(str(tmp_path / "t.db")), policy=access.Policy(run_everyone=True))


def _plan(ctx, text, channel="CKO"):
    return commands.plan(ctx, text, "U1", channel, TODAY)["text"]


def _korean(ctx):
    assert "(`ko`)" in _plan(ctx, "settings lang=ko")


def test_a_plan_started_and_shown_in_korean_keeps_names_and_commands(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    out = _plan(ctx, "new adkv gpu=H100")
    assert out.startswith("계획 *adkv*을(를) gpu=H100-80GB(으)로 시작했습니다.")
    assert "다음: `/plan adkv set platform=cuda paper=...`" in out
    assert "`/plan adkv block baseline runs=N trial=T12`" in out
    shown = _plan(ctx, "adkv show")
    assert shown.startswith("*계획 adkv* — 대상 H100-80GB(플랫폼 설정 안 됨), 임대 per-block")
    assert "아직 블록이 없습니다: `/plan adkv block baseline runs=N trial=T12`." in shown
    assert "*남은 체크리스트 항목*: paper, baseline" in shown
    assert "*기록* (체크리스트 항목 15개 중 1개 채움):\n• gpu: H100-80GB\n" in shown
    _plan(ctx, 'adkv set scope="표 3: 128K 문맥"')
    assert "• scope: 표 3: 128K 문맥" in _plan(ctx, "adkv show")  # user's text, unchanged
    review = _plan(ctx, "adkv review")
    assert review.startswith("*계획 adkv*: 추정치 대 실측치(GPU-시간)")
    assert "`/plan adkv actual baseline hours=H`" in review


def test_the_same_commands_in_an_english_channel_stay_english(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    out = _plan(ctx, "new other gpu=H100", channel="CEN")
    assert out.startswith("Plan *other* started with gpu=H100-80GB.")
    assert _plan(ctx, "other show", channel="CEN").startswith("*Plan other* — target H100-80GB")
    assert "아무것도" not in _plan(ctx, "other block compare runs=0 trial=T1", channel="CEN")


def test_bad_input_is_refused_in_korean_naming_the_word_and_the_fix(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    _plan(ctx, "new adkv")
    out = _plan(ctx, "adkv block compare runs=abc trial=T1")
    assert out.startswith(":x: `runs=abc`: runs은(는) 1부터 10,000,000까지의 정수여야 합니다. "
                          "예: runs=10")
    assert out.endswith("아무것도 저장하지 않았습니다. `/plan help`에 명령 목록이 있습니다.")
    out = _plan(ctx, "adkv set period=3")
    assert "`period=3`: period는 단위(d, w, mo, y)를 붙인 기간입니다. 예: 10d, 6w, 3mo 또는 1y" \
        in out
    out = _plan(ctx, "nope show")
    assert "`nope` 계획이 없습니다. 이 채널의 계획: adkv. `/plan new nope`으로" in out
    assert "혹시 `/plan adkv`입니까?" in _plan(ctx, "adkvv show")
    assert "`Bad!`은(는) 계획 이름이 될 수 없습니다" in _plan(ctx, "new Bad!")
    out = _plan(ctx, "digest weekly mon 25:00 Asia/Seoul")
    assert "`25:00`: 시는 00 ~ 23 범위입니다(자정은 00:00). 예: 09:00" in out


def test_a_refusal_names_the_missing_permission_in_korean(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    out = _plan(ctx, "price H100 2.49/h source=quote date=2026-11-30")
    assert out.startswith(":lock: 가격 기록은(는) 관리자만 할 수 있습니다(권한: admin).")
    assert "TRIALBOT_ADMINS" in out and out.endswith("아무것도 변경하지 않았습니다.")
    assert ctx.store.prices() == []


def test_facts_set_in_korean_keep_korean_values(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    _plan(ctx, "new adkv")
    out = _plan(ctx, 'adkv set paper="한국어 논문 v2" period=3w')
    assert out.startswith("계획 *adkv*: paper=한국어 논문 v2 설정; period=3주(21일) 설정.")
    assert "남은 체크리스트 항목: baseline" in out
    assert ctx.store.plan("adkv")["facts"]["paper"] == "한국어 논문 v2"


def test_pure_renderings_follow_the_language_in_use():
    with i18n.using("ko"):
        assert changes.fact_value("period", 21) == "3주(21일)"
        assert changes.fact_value("period", 365.25) == "1년(365일)"
    assert changes.fact_value("period", 21) == "3 weeks (21 days)"
    from bot.plans import calibration
    with i18n.using("ko"):
        text = calibration.calibrate([], scope="1× H100 · llm-infer")["text"]
    assert text == ("보정 안 됨: 필요한 쌍 9개 중 0개 (1× H100 · llm-infer)"
                    "(기록된 실측치 9개 더 필요)")


def test_help_in_korean_keeps_every_command(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    out = _plan(ctx, "help")
    assert out.startswith("*`/plan`*은 측정한 트라이얼을 GPU-시간 추정치")
    assert "`/plan NAME set key=value ...`는 체크리스트" in out
    assert "*체크리스트*" not in out  # each item's meaning is `/plan help set`'s
    assert "*체크리스트*: `paper` 논문과 버전(예: arXiv 2405.01234v2)" in _plan(ctx, "help set")
    assert "`/plan digest weekly mon 09:00 Asia/Seoul`" in out


def test_a_block_from_an_unknown_trial_is_refused_in_korean(tmp_path):
    ctx = _ctx(tmp_path)
    _korean(ctx)
    _plan(ctx, "new adkv")
    out = _plan(ctx, "adkv block baseline runs=10 trial=T99")
    assert out.startswith(":x: 트라이얼 T99이(가) 없습니다. `/trial list`가 최근 트라이얼을 "
                          "보여 줍니다")
    assert ctx.store.blocks("adkv") == []


def test_a_slurm_answer_speaks_korean_and_keeps_job_ids():
    from bot.plans import slurm
    req = {"plan": "adkv", "block": "baseline", "jobs": ["123456"], "user": "U1"}
    with i18n.using("ko"):
        actual, text = slurm.outcome(req, {"error": "sacct: command not found"})
    assert actual is None
    assert text == (":x: *adkv* baseline의 Slurm 사용 기록(작업 123456): Slurm 워커가 읽지 "
                    "못했습니다: sacct: command not found. 아무것도 기록하지 않았습니다"
                    "(요청자 <@U1>).")
    assert slurm.outcome(req, {"error": "x"})[1].startswith(
        ":x: Slurm accounting for *adkv* baseline (jobs 123456): the Slurm worker could not")


def test_an_export_in_korean_keeps_its_keys_and_columns_english(tmp_path):
    import json

    from bot.plans import export
    ctx = _ctx(tmp_path)
    _korean(ctx)
    _plan(ctx, "new adkv gpu=H100")
    with i18n.using("ko"):
        made = dict(export.files(ctx.store.plan("adkv"), [], [], [], TODAY))
    md, data = made["md"], json.loads(made["json"])
    assert md.startswith("# 계획 adkv\n") and "\n## 체크리스트\n" in md
    assert "- [ ] 논문과 버전(예: arXiv 2405.01234v2): (미정)" in md
    assert "- [x] 대상 GPU 종류(예: H100): H100-80GB" in md
    assert made["csv"].startswith("plan,block,runs,configs,gpus,component,gpu_hours,")
    assert data["target"] == "H100-80GB" and set(data) >= {"checklist", "prices", "history"}
    assert data["prices"]["line"].startswith("비용 미확인: H100-80GB의 확인된 가격이 없습니다")


def test_a_block_priced_and_shown_in_korean(tmp_path):
    from test_planner import report
    from test_plans import finish
    ctx = context(Store(str(tmp_path / "p.db")), admins=frozenset({"U1"}))
    _korean(ctx)
    t = finish(ctx, report())
    _plan(ctx, "new repro gpu=H100 platform=cuda")
    out = _plan(ctx, f'repro block baseline runs=200 trial={t} note="어떤 프롬프트?"')
    assert out.startswith("계획 *repro*: baseline 블록을 추가했습니다 — ")
    assert f"에서 실행한 {t} 기반." in out and "GPU-h" in out
    out = _plan(ctx, "price H100 ₩3500/h source=견적 date=2026-11-30")
    assert out.startswith("P1을(를) 기록했습니다: H100-80GB 임대 GPU-시간당 ₩3500 (출처: 견적, "
                          "2026-11-30 확인).")
    shown = _plan(ctx, "repro show")
    assert "비용 기준: H100-80GB 임대 GPU-시간당 ₩3500 (P1, 출처: 견적, 2026-11-30 확인)" in shown
    assert "전기 요금 kWh당 ₩150 (" in _plan(ctx, "price electricity ₩150/kWh source=견적 "
                                                "date=2026-11-30")
    history = _plan(ctx, "repro history")
    assert "baseline 블록" in history and "block baseline" not in history
    assert "가격 P1(공유 가격표)" in history
    assert "블록" in shown and "합계" in shown and "• baseline: 어떤 프롬프트?" in shown
    assert "GPU-시간 = 측정한 경과 시간 × GPU 수" in commands.plan(
        ctx, "repro show", "U1", "CKO", TODAY)["blocks"][-1]["elements"][0]["text"]


def test_a_block_measured_off_the_target_is_shown_apart_in_korean(tmp_path):
    from test_planner import report
    from worker.spec import parse
    ctx = _ctx(tmp_path)
    _korean(ctx)
    job = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "CKO")
    ctx.queue.finish(job["id"], "w1", ctx.store.lease_next("w1", 60)["lease"],
                     report(gpu=None))
    _plan(ctx, "new adkv gpu=H100")
    added = _plan(ctx, f"adkv block baseline runs=10 trial=T{job['id']}")
    assert "CPU (EPYC)에서 측정: H100-80GB의 시간이 아니므로 합계와 비용에서 뺐습니다" in added
    shown = _plan(ctx, "adkv show")
    assert "대상 밖" in shown and "해당 없음: H100-80GB에서 측정한 블록이 없음" in shown
    assert ("아직 없는 것: H100-80GB에서의 짧은 트라이얼 `/trial llm-infer batch=4 prompt=512 "
            "gpu=H100-80GB`") in shown
