import pytest

from bot.trials import command as trial_command
from worker import spec


def test_defaults_fill_every_parameter():
    s = spec.parse(["llm-infer", "batch=4", "dtype=bf16"])
    assert s.workload == "llm-infer"
    assert s.params["batch"] == 4 and s.params["dtype"] == "bf16"
    assert s.params["prompt"] == 64 and s.params["device"] == "auto"
    assert spec.parse(s.words().split()) == s


@pytest.mark.parametrize("words, token, says", [
    (["llm-infer", "batch=0"], "batch=0", "from 1 to 4096"),
    (["llm-infer", "batch=-1"], "batch=-1", "from 1 to 4096"),
    (["llm-infer", "batch=two"], "batch=two", "whole number"),
    (["llm-infer", "prompt=1e12"], "prompt=1e12", "must be from 1 to 131072, e.g. prompt=64"),
    (["llm-infer", "prompt=2.5"], "prompt=2.5", "whole number written in digits"),
    (["llm-infer", "dtype=fp8"], "dtype=fp8", "fp32, bf16, fp16"),
    (["llm-infer", "colour=red"], "colour=red", "has no parameter"),
    (["llm-infer", "batch"], "batch", "key=value"),
    (["llm-infer", "batch=1", "batch=2"], "batch=2", "twice"),
    (["llm-infer", "heads=3"], "heads=3", "divide evenly"),
    (["llm-infer", "kv_heads=3"], "kv_heads=3", "multiple of kv_heads"),
    (["gpt-9"], "gpt-9", "not a workload"),
])
def test_bad_words_name_the_token(words, token, says):
    with pytest.raises(spec.SpecError) as err:
        spec.parse(words)
    assert err.value.token == token
    assert says in err.value.message
    assert err.value.usage.startswith("/trial")


def test_trial_subcommands():
    assert trial_command.parse_trial("").name == "help"
    assert trial_command.parse_trial("help").name == "help"
    assert trial_command.parse_trial("list").name == "list"
    assert trial_command.parse_trial("status T12").job_id == 12
    assert trial_command.parse_trial("status 7").job_id == 7
    run = trial_command.parse_trial("llm-infer batch=2")
    assert run.name == "run" and run.spec.params["batch"] == 2


@pytest.mark.parametrize("text, token", [("status", "status"), ("status X1", "X1"),
                                         ("list mine now", "mine"), ('llm-infer "oops', '')])
def test_bad_subcommands(text, token):
    with pytest.raises(spec.SpecError) as err:
        trial_command.parse_trial(text)
    assert token in err.value.token


def test_malloc_auto_is_left_to_the_worker_at_partial_depth_too():
    s = spec.parse(["llm-infer", "preset=llama-3-8b", "layers=2"])
    assert s.params["malloc"] == "auto"  # the worker's two passes, not live in one
    assert spec.parse(s.words().split()) == s
    assert spec.parse(["llm-infer", "preset=llama-3-8b", "layers=2",
                       "malloc=live"]).params["malloc"] == "live"
    help_ = spec.LLM_INFER.param("malloc").help
    assert "auto = on a CPU two passes" in help_ and "partial-depth" in help_
    assert "auto = live" not in help_
