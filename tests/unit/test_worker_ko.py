"""Korean where the worker's words reach a user: parameter checks and `/trial
help` (worker/spec.py), the report's text (worker/summary.py), the notes about
a message Slack refused (bot/delivery), the card's buttons and the console.
Numbers, units, ids and backticked words stay as written; English stays English."""
from __future__ import annotations

import io
from unittest.mock import Mock

import pytest

from bot import commands
from bot.app import console
from bot.app.runtime import context
from bot.delivery import refusals
from bot.slack.listeners import actions
from bot.store import Store
from worker import i18n, spec, summary
from worker import report as reports


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "k.db")), admins=frozenset({"UADMIN"}))
    ctx.store.set_channel_lang("CKO", "ko", "U1")
    return ctx


def _refusal(words: list[str]) -> str:
    with pytest.raises(spec.SpecError) as exc:
        spec.parse(words)
    return exc.value.message


@pytest.mark.parametrize("words, korean, english", [
    (["llm-infer", "batch=0"], "`batch=0`: batch은(는) 1부터 4096까지여야 합니다",
     "`batch=0`: batch must be from 1 to 4096"),
    (["llm-infer", "dtype=int3"], "`dtype=int3`: dtype은(는) fp32, bf16, fp16 중 하나여야 합니다",
     "`dtype=int3`: dtype must be one of fp32, bf16, fp16"),
    (["llm-train", "zero=1"], "world=2(이상)를 추가하십시오",
     "`zero=1`: ZeRO-1 shards optimizer states over ranks and world=1 has one; add world=2"),
    (["llm-infer", "hidden=250", "heads=3"], "250/3는 정수가 아닙니다",
     "250/3 is not whole"),
    (["llm-infer", "batch"], "`batch`: 파라미터는 key=value로 씁니다. 예: batch=4",
     "`batch`: parameters are written key=value, e.g. batch=4"),
    (["llm-inferr"], "워크로드가 아닙니다: `llm-inferr`", "`llm-inferr` is not a workload"),
])
def test_a_parameter_check_speaks_korean_and_keeps_the_words(words, korean, english):
    with i18n.using("ko"):
        assert korean in _refusal(words)
    assert english in _refusal(words)


def test_trial_help_in_a_korean_channel_translates_the_parameters_only(ctx):
    def ask(topic, channel):
        return commands.trial(ctx, f"help {topic}", "U1", channel)[0]["text"]
    ko, en = ask("llm-infer", "CKO"), ask("llm-infer", "CEN")
    assert "• `gen=16` 시퀀스당 생성 토큰 수(decode) (1..65536)" in ko
    assert "*llm-infer*: 디코더 전용 트랜스포머, 무작위 가중치, KV 캐시" in ko
    assert "`model=none` 프리셋(llama-2-7b, " in ask("hf-infer", "CKO")  # the preset list kept
    assert "• `gen=16` tokens generated per sequence (decode) (1..65536)" in en
    assert "`model=none` a preset (llama-2-7b, " in ask("hf-infer", "CEN") and "시퀀스" not in en
    # The worker's own CLI prints the same help in English whatever the bot speaks.
    assert spec.LLM_INFER.param("gen").describe() == ("gen=16 (1..65536) tokens generated per "
                                                      "sequence (decode)")


def test_a_refused_trial_in_a_korean_channel_names_the_word_in_korean(ctx):
    text = commands.trial(ctx, "llm-infer batch=0", "U1", "CKO")[0]["text"]
    assert "`batch=0`: batch은(는) 1부터 4096까지여야 합니다" in text
    assert ctx.store.jobs() == []


def _report(**extra) -> dict:
    r = reports.new_report("llm-infer", {"malloc": "glibc"})
    r.update(trial="T7", worker="w1", seconds=12.3456, **extra)
    return r


def test_a_failed_report_reads_in_korean_with_its_figures_unchanged():
    r = reports.fail(_report(), "oom", "CUDA out of memory", "run")
    r["memory"]["host_rss_peak"] = 3 * 2**30
    with i18n.using("ko"):
        ko = summary.text(r)
    en = summary.text(r)
    assert ko.startswith("T7 llm-infer 실패(oom, run 단계), w1에서 12.3 s")
    assert "오류: CUDA out of memory" in ko and "호스트 RSS 최대치: 3 GiB (자식 프로세스 트리" in ko
    assert en.startswith("T7 llm-infer FAILED (oom, phase run) on w1 in 12.3 s")
    assert "host RSS peak: 3 GiB (child tree, sampled ~100 Hz, glibc's default" in en


@pytest.mark.parametrize("scenario, metric, korean", [
    ("offline", "throughput", "offline: 처리량 398.2 tokens/s"),
    ("single-stream", "p90 latency", "single-stream: p90 지연 시간 398.2 tokens/s"),
    (None, "step time", "— 스텝 시간 398.2 tokens/s")])
def test_the_headline_metric_stored_in_english_reads_in_korean(scenario, metric, korean):
    """The report stores its headline's metric in English; the card once showed
    "T1 llm-infer 성공 … — offline: throughput 398.2 tokens/s" (#33)."""
    r = _report(status="ok", scenario=scenario,
                headline={"metric": metric, "value": 398.2, "unit": "tokens/s"})
    with i18n.using("ko"):
        assert korean in summary.headline(r)
    assert f"{metric} 398.2 tokens/s" in summary.headline(r)


def test_a_trials_tries_read_in_korean_in_its_status(ctx):
    from bot.trials import views
    job = {"trial": "T1", "words": "llm-infer", "status": "done", "worker": "w1"}
    tries = [{"n": 1, "worker": "w1", "status": "ok", "error_class": None, "message": "",
              "seconds": 5.89, "next": None}]
    with i18n.using("ko"):
        text = views.status(job, tries)["text"]
    assert "• 시도 1, 워커 w1: 성공, 5.89 s" in text and "ok" not in text, text
    assert "try 1 on w1: ok, 5.89 s" in views.status(job, tries)["text"]


def test_stability_retries_and_the_machine_read_in_korean():
    unstable = {"iqr_over_median": 0.123, "count": 7, "threshold": 0.05, "stable": False,
                "stopped_by": "run_cap"}
    quiet = {"cpus": 16, "threshold": {"others_cpu": 0.2},
             "phases": {"run": {"seconds": 3.0, "others_cpu": 0.04, "steal": 0.0}}}
    with i18n.using("ko"):
        assert summary.stability(unstable) == ("불안정: 요청 7회 후 IQR/중앙값 12.3% ≥ 5% "
                                               "(run_cap); 이 수치는 주의해서 보십시오")
        assert summary.stability(dict(unstable, count=3), "step").startswith(
            "불안정: 3 스텝 후")
        assert summary.machine(quiet) == ("조용함: run 단계 동안 다른 프로세스가 CPU 16개의 "
                                          "4%를 사용했습니다(스틸 시간 0%; 20% 초과 시 표시)")
    assert summary.stability(unstable) == ("UNSTABLE: IQR/median 12.3% ≥ 5% after 7 requests "
                                           "(run_cap); treat these figures with care")
    assert summary.stability(dict(unstable, count=1, stable=True)) == (
        "stable: IQR/median 12.3% < 5% after 1 request")


def test_a_refusal_note_speaks_the_channel_language_and_keeps_the_command():
    with i18n.using("ko"):
        note = refusals.notice("not_in_channel", "CKO", "T3", "chart")
        other = refusals.notice("weird_error", "CKO", None, None)
    assert note == (":warning: T3의 메모리 차트 — <#CKO>에 게시하지 못했습니다: 저는 <#CKO>의 "
                    "멤버가 아닙니다. 그 채널에서 `/invite @trialbot`으로 초대하십시오. "
                    "`/trial status T3`로 보고서를 볼 수 있습니다.")
    assert other == (":warning: 메시지 — <#CKO>에 게시하지 못했습니다: Slack이 거부했습니다"
                     "(weird_error).")
    assert refusals.notice("not_in_channel", "C1", "T3", "chart") == (
        ":warning: T3's memory chart could not be posted in <#C1>: I am not a member of <#C1>: "
        "invite me with `/invite @trialbot` there. `/trial status T3` shows the report.")


def test_a_button_answers_in_the_language_of_the_card_s_channel(ctx):
    respond = Mock()
    body = {"user": {"id": "U1"}, "trigger_id": "x", "channel": {"id": "CKO"}}
    # the answer goes after the ack (bot/slack/later.py): the callback returns its future
    actions.add_to_plan_callback(ack=Mock(), body=body, action={"value": "41"}, client=Mock(),
                                 respond=respond, context={"trialbot": ctx}).result(10)
    assert respond.call_args.kwargs["text"] == ":x: 트라이얼 T41는 더 이상 없습니다."
    respond = Mock()
    actions.add_to_plan_callback(ack=Mock(), body=dict(body, channel={"id": "C1"}),
                                 action={"value": "41"}, client=Mock(), respond=respond,
                                 context={"trialbot": ctx}).result(10)
    assert respond.call_args.kwargs["text"] == ":x: There is no trial T41 any more."


def test_the_console_frames_messages_in_its_channel_s_language(ctx):
    out = io.StringIO()
    transport = console.ConsoleTransport(out, as_json=False)
    transport.language = ctx.store.channel_lang
    transport.send({"channel": "CKO", "text": "hi", "via": "ephemeral", "user": "U1"})
    transport.send({"channel": "C1", "text": "hi", "via": "dm", "user": "U1"})
    assert out.getvalue() == "[#CKO, <@U1>에게만]\nhi\n[to <@U1>]\nhi\n"


def _busy_report() -> dict:
    from worker import notes
    from worker.probes import contention
    gpu = {"flagged_notes": [notes.message(notes.GPU_OTHERS, n=2, index=0, gib="1.50"),
                             notes.message(notes.GPU_SLOWED, index=0, reasons="thermal")]}
    busy = [("run", {"others_cpu": 0.41, "others_cpu_max": 0.9, "steal": 0.2})]
    note = contention._busy_note(busy, gpu)
    return _report(contention={"flagged": True, "summary": notes.english(note),
                               "summary_note": note})


def test_a_busy_machine_s_warning_written_by_the_worker_reads_in_korean():
    r = _busy_report()
    english = ("busy machine: other processes used 41% of the CPU during the run phase (up to "
               "90% over 0.5 s), and the hypervisor took 20% (steal); 2 other process(es) on "
               "GPU 0 holding 1.50 GiB; GPU 0 clocks slowed (thermal): these times are not the "
               "machine's own speed; re-run on a quiet machine")
    assert r["contention"]["summary"] == english == summary.busy_line(r)
    with i18n.using("ko"):
        ko = summary.busy_line(r)
        assert summary.machine(r["contention"]) == ko
    assert ko == ("다른 작업으로 바쁜 머신: run 단계 동안 다른 프로세스가 CPU의 41%를 사용했고"
                  "(0.5 s 구간에서 최대 90%), 하이퍼바이저가 20%를 가져갔습니다(스틸 시간); "
                  "GPU 0에서 다른 프로세스 2개가 1.50 GiB를 점유; GPU 0 클럭 저하(thermal). "
                  "이 시간은 머신 본래의 속도가 아니니 조용한 머신에서 다시 실행하십시오")


@pytest.mark.parametrize("note", [
    None,  # a report from before the note
    {"id": "{x.__class__} leaks", "values": {"x": "a"}},  # not a message the worker writes
    {"id": "busy GPU: {gpu}: these times are not the machine's own speed; re-run on a quiet "
           "machine", "values": {"gpu": {"nested": True}}},  # a value of the wrong kind
])
def test_an_old_or_unknown_note_shows_the_english_the_report_carries(note):
    r = _report(contention={"flagged": True, "summary": "busy GPU: as the worker wrote it",
                            "summary_note": note})
    with i18n.using("ko"):
        assert summary.busy_line(r) == "busy GPU: as the worker wrote it"


def test_the_documented_gpu_only_note_reads_as_docs_report_schema_says():
    from worker import notes
    from worker.probes import contention
    note = contention._busy_note([], {"flagged_notes": [
        notes.message(notes.GPU_SLOWED, index=0, reasons="thermal")]})
    with i18n.using("ko"):
        assert notes.said(note).startswith("다른 작업으로 바쁜 GPU: GPU 0 클럭 저하(thermal). ")
    assert notes.english(note).startswith("busy GPU: GPU 0 clocks slowed (thermal): these times")


def test_a_model_s_source_and_the_optimizer_theory_read_in_korean():
    from worker import models, notes
    found = models.resolve("mistral-7b", [], hub=False)
    assert found["source"] == "trialbot's copy of mistralai/Mistral-7B-v0.1's config.json"
    m = {"name": "mistral-7b", "architecture": "MistralForCausalLM", "layers": 2,
         "full_layers": 32, "attn": "sdpa", "transformers": "4.57.1",
         "weights": notes.RANDOM_WEIGHTS, "source": found["source"],
         "source_note": found["source_note"]}
    tr = {"params": 1234567, "precision": "bf16", "checkpointing": "none", "zero": 1,
          "world": 2, "loss_first": 8.3, "loss_final": 8.1, "steps": 6,
          "optimizer_state_theory_per_rank": 4 * 2**20, "theory": "as the worker wrote it",
          "theory_note": notes.message(notes.THEORY_ZERO, world=2),
          "ranks": [{"rank": 0, "optimizer_state_bytes": 4 * 2**20}]}
    with i18n.using("ko"):
        assert summary.model_line(m) == (
            "mistral-7b: MistralForCausalLM, 레이어 32개 중 2개, attn=sdpa, transformers 4.57.1, "
            "무작위(설정 파일로 생성; 아무것도 내려받지 않음); 설정 파일 출처: trialbot에 "
            "들어 있는 mistralai/Mistral-7B-v0.1의 config.json 사본")
        assert summary.training(tr).endswith(
            "(이론값 랭크당 4.00 MiB: AdamW는 exp_avg와 exp_avg_sq를 fp32로 보관합니다: "
            "8 bytes/param, ZeRO-1 방식으로 랭크 2개에 나눔)")
    assert summary.model_line(m).endswith("random (from the config; nothing downloaded); config "
                                          "from trialbot's copy of mistralai/Mistral-7B-v0.1's "
                                          "config.json")
    assert summary.training(tr).startswith("1,234,567 params, bf16, checkpointing none, ZeRO-1 "
                                           "over 2 rank(s); loss 8.3000 → 8.1000 after 6 steps")
