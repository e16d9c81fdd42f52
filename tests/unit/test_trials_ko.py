"""`/trial` in Korean: a channel set with `/plan settings lang=ko` gets its
replies, errors, cards and tables in Korean, with ids, numbers and backticked
commands as typed; another channel stays English. In-process, no worker."""
import datetime as dt

import pytest

from bot import commands
from bot.app.runtime import context
from bot.blocks import table_text, width
from bot.store import Store
from bot.trials import ab, card, ladder, workerlist
from bot.trials import command as trial_command
from worker import i18n

QUICK = "llm-infer gen=2 repeats=1 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 processes=1"


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "ko.db")))
    commands.plan(ctx, "settings lang=ko", "U1", "CKO", dt.date(2026, 12, 1))
    return ctx


def trial(ctx, text, channel="CKO", user="U1"):
    return commands.trial(ctx, text, user, channel)


def test_queue_status_list_and_cancel_speak_the_channels_language(ctx):
    answer, job = trial(ctx, QUICK)
    assert job["trial"] == "T1"
    text = answer["text"]
    assert "*T1*(으)로 대기열에 추가했습니다" in text and f"`{QUICK}`" in text
    assert "`/trial status T1`" in text and "`trialbot-worker --server URL --token TOKEN`" in text
    status = trial(ctx, "status T1")[0]["text"]
    assert f"*T1* `{QUICK}` — *대기열에 추가됨*" in status
    assert "최근 트라이얼:" in trial(ctx, "list")[0]["text"]
    assert trial(ctx, "list failed")[0]["text"] == "이 채널에 실패한 트라이얼이 없습니다."
    cancelled = trial(ctx, "cancel T1")[0]["text"]
    assert cancelled == (":no_entry_sign: T1은(는) 대기열에 있었고 취소되었습니다. "
                         "실행되지 않습니다.")
    note = next(m for m in ctx.store.unsent() if m["text"].startswith(":no_entry_sign:"))
    assert "*T1* 시작 전에 <@U1>이(가) 취소했습니다" in note["text"]
    # the same in an English channel, and the stored status word, stay English
    assert "Queued as *T2* on next free worker" in trial(ctx, QUICK, channel="CEN")[0]["text"]
    assert ctx.store.job(1)["status"] == "cancelled"
    assert "— *queued*" in trial(ctx, "status T2", channel="CEN")[0]["text"]


def test_the_cards_buttons_answer_in_the_cards_channels_language(ctx):
    trial(ctx, QUICK)
    trial(ctx, QUICK, channel="CEN")
    # Re-run and Cancel come from a click, with no command around them (bot/slack/listeners)
    assert "*T3*(으)로 대기열에 추가했습니다" in trial_command.rerun(ctx, 1, "U1")["text"]
    assert "Queued as *T4*" in trial_command.rerun(ctx, 2, "U1")["text"]
    with pytest.raises(ValueError) as refused:
        trial_command.cancel(ctx, 3, "U2")
    assert str(refused.value).startswith("T3은(는) <@U1>이(가) 시작했습니다. 그 사람이나 관리자만")
    with pytest.raises(ValueError) as ended:
        trial_command.cancel(ctx, 99, "U1")
    assert "there is no trial T99" in str(ended.value)  # no channel: the bot's default


def test_bad_input_is_refused_in_korean_naming_the_word(ctx):
    text = trial(ctx, "sweep llm-infer batch=1,,4")[0]["text"]
    assert "`batch=1,,4`: 목록에 빈 항목이 있습니다" in text and "예: batch=1,2,4" in text
    assert "사용법: `/trial sweep llm-infer batch=1,2,4,8 prompt=512" in text
    assert text.endswith("아무것도 대기열에 추가하지 않았습니다.")
    assert "트라이얼 T99이(가) 없습니다. `/trial list`" in trial(ctx, "status T99")[0]["text"]
    assert "`/trial fit`은 스윕 ID를 받습니다" in trial(ctx, "fit")[0]["text"]
    route = trial(ctx, f"{QUICK} min_mem=lots")[0]["text"]
    assert "`min_mem=lots`: min_mem은(는) 크기입니다." in route and "예: min_mem=24GB" in route
    english = trial(ctx, "sweep llm-infer batch=1,,4", channel="CEN")[0]["text"]
    assert "`batch=1,,4`: an empty item in the list" in english and "사용법" not in english


def test_help_keeps_every_command_word():
    with i18n.using("ko"):
        ko = trial_command.help_text()
    en = trial_command.help_text()
    assert "*스윕*:" in ko and "*Sweeps*:" in en
    for command in ("`/trial fit S12 batch=32 prompt=2048 gpu=H100`", "`/trial workers`",
                    "`/trial list [mine|running|failed]`", "`--recipes FILE`"):
        assert command in ko and command in en
    assert ko.count("\n") == en.count("\n")  # the same lines, each translated


def test_card_buttons_and_modal_in_korean():
    job = {"id": 3, "trial": "T3", "channel": "C", "words": "llm-infer batch=2", "user": "U1",
           "cancel": 0, "started_msg": 7}
    with i18n.using("ko"):
        started = card.started(job, "w1", {"phase": "run", "attempt": 2, "failed": ["oom"]})
        tries = card.failed_tries(job, [], {"attempt": 2, "failed": ["oom"]})
        modal = card.plan_modal(job, [("adkv", "baseline")])
    assert started["text"].startswith(":hourglass_flowing_sand: *T3* 시작, 워커 *w1*: "
                                      "`llm-infer batch=2` (<@U1> 요청)")
    assert "단계 `run` · 시도 2 (시도 1: oom)" in started["text"]
    assert started["blocks"][1]["elements"][0]["text"]["text"] == "취소"
    assert tries[0]["text"] == ":warning: T3 시도 1 실패(oom). 시도 2을(를) 시작했습니다"
    assert modal["title"]["text"] == "T3을(를) 계획에 추가" and modal["submit"]["text"] == "추가"
    assert card.started(job, "w1")["blocks"][1]["elements"][0]["text"]["text"] == "Cancel"


def test_workers_ab_and_ladder_replies_in_korean():
    now = 1_764_633_600.0  # Tue 2025-12-02 00:00 UTC
    worker = {"name": "box", "info": {"cpus": 16}, "last_seen": now - 5, "job": None,
              "job_started": None, "last_finished": now - 120, "registered": now - 900,
              "idle_seconds": 5400}
    jobs = [{"id": i, "trial": f"T{i}", "words": f"llm-infer dtype={d}"}
            for i, d in zip(range(4, 10), ["fp32", "bf16", "bf16", "fp32", "fp32", "bf16"])]
    with i18n.using("ko"):
        workers = workerlist.text([worker], now, 90)
        queued_ab = ab.queued(jobs)["text"]
        queued_ladder = ladder.queued(jobs[:4], 24 * 2**30)["text"]
        advice = ladder.recommend([{"step": "baseline", "ok": False, "why": "oom: "}], None)
    assert "• *box* — GPU 없음(CPU 코어 16) — " in workers and "이번 주 유휴 1.5 h" in workers
    assert "유휴(2 min 전)" not in workers and "부터 유휴(" in workers
    assert queued_ab.startswith("A/B 3 라운드를 대기열에 추가했습니다: A `llm-infer dtype=fp32`"
                                " (T4, T7, T8)")
    assert "A T4, B T5, B T6, A T7, A T8, B T9 순서로 실행합니다(ABBA" in queued_ab
    assert "래더 *L4*을(를) 예산 24 GiB으로" in queued_ladder
    assert "• T4 baseline: `llm-infer dtype=fp32`" in queued_ladder
    assert advice == ["기준선이 실행되지 않아 어떤 단계도 판정할 수 없습니다. "
                      "먼저 기준선을 고치십시오."]
    assert ab.queued(jobs[:2])["text"].startswith("Queued an A/B of 1 round: A ")


def test_a_table_with_a_korean_header_lines_up():
    rows = [["단계", "trial"], ["baseline", "T1"]]
    lines = table_text(rows).splitlines()
    assert width("단계") == 4 and lines == ["단계      trial", "baseline  T1"]
    assert table_text([["step", "x"], ["baseline", "T1"]]) == "step      x\nbaseline  T1"


def test_a_ladder_table_and_its_recommendation_in_korean():
    from test_ladder import report  # the ladder tests' synthetic step reports

    reports = [report(10 * 2**30, 1.0, 5.0), report(9 * 2**30, 0.9, 5.0, step=1),
               report(8 * 2**30, 1.2, 5.0, step=2), report(7 * 2**30, 1.3, 5.0, 2, (400, 400))]
    jobs = [{"id": 1, "trial": f"T{i}", "channel": "C"} for i in (1, 2, 3, 4)]
    with i18n.using("ko"):
        text = ladder.message(jobs, reports, 2**30)["text"]
    head, rows = text.split("```")[1].splitlines()[0], text.split("```")[1].splitlines()[1:]
    assert text.startswith("*래더 L1* (T1–T4)\n") and head.startswith("단계           트라이얼")
    assert [r.split()[0] for r in rows] == list(ladder.STEPS)  # step names as typed
    assert "• 1 GiB에 맞는 것이 없습니다: 가장 좋은 것이 7 GiB입니다(6 GiB 초과)." in text
    assert "가장 작은 GPU는 L4 (24 GB)입니다" in text
    assert text.endswith("• 권장 구성: precision=bf16 checkpointing=full zero=1 world=2 "
                         "(zero-1 단계, T4).")
    english = ladder.message(jobs, reports, 2**30)["text"]
    assert "Nothing fits 1 GiB: the best is 7 GiB (6 GiB over)." in english
