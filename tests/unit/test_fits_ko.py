"""Korean for the fits and the digest (docs/i18n.md): a sweep's fit message, the
largest batch on a GPU, the A/B verdict, the GPU names' errors and `/plan digest`
speak Korean in a Korean channel, with numbers, ids, units and backticked
commands as they are; the same stays English elsewhere. In process, no worker."""
import datetime as dt

import pytest

from bot import commands
from bot.app.runtime import context
from bot.blocks import table_text
from bot.digest import build as digest_build
from bot.digest import command as digest_command
from bot.fits import batchview, compare, gpus, usable
from bot.fits.sweep import fit_sweep
from bot.store import Store
from test_scaling import cuda, llm_report
from worker import i18n

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _fit():
    """A GPU sweep whose true model is 1 GB + 0.2 GB per sequence (tests/test_scaling.py)."""
    return fit_sweep([cuda(llm_report(f"T{b}", b, memory={"process_used_peak":
                                                          10**9 + 2 * 10**8 * b}))
                      for b in (1, 2, 4)])


def _jobs():
    return [{"trial": f"T{b}", "status": "done", "channel": "C1"} for b in (1, 2, 4)]


def test_a_sweep_fit_reads_in_korean_with_its_figures_ids_and_commands_kept():
    with i18n.using("ko"):  # as the bot does: the fit is made for the channel that asks
        ko = "\n".join(batchview.fit_parts(12, _jobs(), _fit()))
    en = "\n".join(batchview.fit_parts(12, _jobs(), _fit()))
    assert "*스윕 S12*" in ko and "T1–T4: 성공 3, 실패 0" in ko
    assert "*측정된 점*" in ko and "*최대 메모리 — process_used_peak* (NVML 프로세스별 사용량" in ko
    assert "(항: 1, b; 스윕이 바꾼 것에 대한 기본 모델)" in ko
    assert "`/trial fit S12 batch=N gpu=H100`으로 물어보십시오" in ko
    assert "*측정한 GPU에서* (NVIDIA H200, 워커가 보고한 전체 140 GiB)" in ko
    # the same figures in both languages: only the words around them change
    for figure in ("≈ 954 MiB + 191 MiB·b", "1.68 GiB", "T4 (b=4, s=80)", "*744*",
                   "`/trial fit S12 gpu=H100`", "(90% "):
        assert figure in en and figure in ko
    assert "자유도 1" in ko and "dof 1" in en
    assert "*Sweep S12*" in en and "*Measured points*" in en and "스윕" not in en


def test_the_largest_batch_on_a_named_gpu_and_its_datasheet_note_in_korean():
    fit = _fit()
    h100 = gpus.lookup("h100")
    with i18n.using("ko"):
        ko = "\n".join(batchview.answer_parts(12, _jobs(), fit, {}, h100))
    assert "*최대 batch — H100-80GB: NVIDIA H100 Tensor Core GPU datasheet 기준 80 GB" in ko
    assert "H100 SXM5와 H100 PCIe 모두 80GB로 명시" in ko  # the table's note, translated
    assert "`gpu=<size>GiB`" in ko and "nvidia-smi의 memory.total" in ko
    en = "\n".join(batchview.answer_parts(12, _jobs(), fit, {}, h100))
    assert "H100 SXM5 and H100 PCIe both list 80GB" in en


def test_gpu_name_errors_in_korean_keep_the_name_and_the_sizes():
    with i18n.using("ko"), pytest.raises(gpus.GpuNameError) as typo:
        gpus.named("h1000")
    assert "`h1000`은(는) 알 수 없는 GPU입니다" in str(typo.value)
    assert "H100-80GB을(를) 말씀하신 것입니까?" in str(typo.value)
    assert "`80GiB`" in str(typo.value) and "`81559MiB`" in str(typo.value)
    with i18n.using("ko"), pytest.raises(gpus.GpuNameError) as ambiguous:
        gpus.named("A100")
    assert "`A100`은(는) 모호합니다" in str(ambiguous.value)
    assert "A100-40GB (40 GB), A100-80GB (80 GB)" in str(ambiguous.value)
    with pytest.raises(gpus.GpuNameError, match="is not a GPU I know; did you mean H100-80GB"):
        gpus.named("h1000")
    with i18n.using("ko"):
        ko = gpus.TABLE["T4"].bf16_source
    assert ko == "Turing: 데이터시트에 FP16은 있지만 BF16 정밀도는 없음"
    assert gpus.TABLE["T4"].bf16_source == "Turing: the datasheet lists FP16 but no BF16 precision"


def _timed(trial, mean, sd=0.002, count=20):
    return {"trial": trial, "status": "ok", "contention": {"flagged": False},
            "latency": {"mean": mean, "stdev": sd, "count": count}}


def test_an_ab_verdict_and_an_unusable_fit_in_korean():
    a = [_timed("T1", 0.100), _timed("T2", 0.101)]
    b = [_timed("T3", 0.080), _timed("T4", 0.081)]
    c = compare.compare(a, b)
    with i18n.using("ko"):
        ko = compare.phrase(c)
        no = compare.phrase(compare.compare(a, [{"trial": "T5", "status": "failed"}]))
    assert ko.startswith("B/A ×0.80 (95% Student t 구간 ×") and "트라이얼 2+2개 기준" in ko
    assert ko.endswith("B이(가) 더 빠릅니다")
    assert "판정 없음: B에 쓸 수 있는 트라이얼이 없습니다 (T5이(가) 성공하지 못했습니다)" in no
    assert "실패한 트라이얼을 고친 뒤 다시 실행하십시오" in no
    assert compare.phrase(c).endswith("B is faster")
    v = {"usable": False, "problem": "held-out error +40.0% at T4, over the 25% bound",
         "why": "w", "instead": "`batch=6`"}
    with i18n.using("ko"):
        assert usable.text(v) == ("사용할 수 없음: held-out error +40.0% at T4, over the 25% "
                                  "bound; 원인: w; 대신: `batch=6`")


def test_the_digest_in_a_korean_channel(tmp_path):
    ctx = context(Store(str(tmp_path / "d.db")), admins=frozenset({"U1"}))

    def say(text, channel):
        return commands.plan(ctx, text, "U1", channel, NOW.date(), NOW)["text"]
    assert "(`ko`)" in say("settings lang=ko", "CKO")
    none = say("digest", "CKO")
    assert none.startswith("이 채널에 예약된 요약이 없습니다.")
    assert "`/plan digest weekly mon 09:00 Asia/Seoul`" in none and "`/plan digest now`" in none
    out = say("digest weekly mon 09:00 Asia/Seoul", "CKO")
    assert "이 채널에 예산 요약을 예약했습니다: 매주 월 09:00 Asia/Seoul; 다음 월 2026-12-07 " \
           "09:00 KST." in out
    assert say("digest", "CEN").startswith("No digest is scheduled in this channel.")
    with i18n.using("ko"):
        s = digest_build.plan_line({"name": "adkv", "blocks": 0})
        split = digest_build._split({c: 3600.0 for c in digest_build.COMPONENTS}, "GPU-h")[0]
    assert s == "• *adkv*: 아직 블록이 없습니다"
    assert split == "5.00 GPU-h = 실행 1.00 + 준비 1.00 + 데이터 1.00 + 재시도 1.00 + 유휴 1.00"


def test_a_late_scheduled_digest_speaks_its_channels_language(tmp_path):
    """The scheduler's thread has no command around it: the post sets the channel's
    language itself."""
    ctx = context(Store(str(tmp_path / "d.db")), admins=frozenset({"U1"}))
    for channel, lang in (("CKO", "ko"), ("CEN", "en")):
        commands.plan(ctx, f"settings lang={lang}", "U1", channel, NOW.date(), NOW)
        commands.plan(ctx, "digest weekly mon 09:00 Asia/Seoul", "U1", channel,
                            NOW.date(), NOW)
    fire = digest_build.trigger(ctx.store.digest("CKO")).get_next_fire_time(None, NOW)
    later = fire + dt.timedelta(hours=3)
    for channel in ("CKO", "CEN"):
        assert digest_command.post_scheduled(ctx, ctx.store.digest(channel), later)
    posted = {r["channel"]: r for r in ctx.store.db["outbox"].rows if r["kind"] == "digest"}
    ko, en = posted["CKO"]["text"], posted["CEN"]["text"]
    week = digest_build.week_key(fire)
    assert ko.startswith(f"*주간 예산 요약* {week} — 월 2026-11-30 09:00 → 월 2026-12-07 09:00 "
                         "Asia/Seoul\n_월 12:00에 늦게 게시했습니다: 예약된 시각(매주 월 09:00 "
                         "Asia/Seoul)에 봇이 실행 중이 아니었습니다._")
    assert "*측정된 GPU-시간*: 0 GPU-h = 실행 0 + 준비 0" in ko and "• 이번 주 GPU-시간 없음" in ko
    assert "• 없음: `/plan new NAME`으로 시작합니다" in ko
    assert en.startswith(f"*Weekly budget digest* {week} — Mon 2026-11-30 09:00 → ")
    assert "late: the bot was not" in en and "every Mon at 09:00" in en
    assert "주간" not in en


def test_a_table_with_korean_headers_keeps_its_columns_aligned():
    with i18n.using("ko"):
        rows = [[i18n._("trial"), "b", i18n._("time")], ["T1", "2", "3.10 ms"]]
    lines = table_text(rows).split("\n")
    assert lines == ["트라이얼  b  시간", "T1        2  3.10 ms"]  # 트라이얼 takes 8 columns
