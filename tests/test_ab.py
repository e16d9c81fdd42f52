"""A/B trials: parsing, the comparison (pure), and one A/B through the console."""
import pytest

from bot.trials import ab
from test_console import run_console
from worker.spec import SpecError


def test_one_parameter_with_two_values_makes_a_and_b():
    pair, lines, key = ab.parse(["llm-infer", "dtype=fp32,bf16", "batch=8"])
    assert key == "dtype" and [s.params["dtype"] for s in pair] == ["fp32", "bf16"]
    assert lines[1] == "llm-infer dtype=bf16 batch=8"


@pytest.mark.parametrize("words, says", [
    (["llm-infer", "dtype=fp32"], "exactly one parameter with two values"),
    (["llm-infer", "dtype=fp32,bf16,fp16"], "exactly one parameter with two values"),
    (["llm-infer", "dtype=fp32,bf16", "batch=1,2"], "exactly one parameter"),
    (["llm-infer", "dtype=bf16,bf16"], "A and B are the same value"),
    (["llm-infer", "dtype=fp32,fp8"], "dtype must be one of"),
])
def test_bad_ab_is_refused(words, says):
    with pytest.raises(SpecError, match=says):
        ab.parse(words)


def infer(latency, rss, logits, tokens):
    return {"latency": {"mean": latency},
            "memory": {"peak_allocated": None, "process_used_peak": None, "host_rss_peak": rss},
            "quality_probe": {"logits_head": logits, "logits_sd": 1.0, "first_tokens": tokens}}


def test_logits_beyond_the_tolerance_break_quality_and_memory_compares_one_method():
    a = infer(1.0, 1000, [0.0, 1.0, -1.0, 2.0], [1, 2])
    close = ab.compare(a, infer(0.5, 900, [0.05, 1.0, -1.0, 2.0], [1, 2]))
    assert close["time"] == -0.5 and close["memory"] == pytest.approx(-0.1)
    assert close["quality"]["held"] and "2 of 2" in close["quality"]["what"]
    far = ab.compare(a, infer(0.5, 900, [1.0, 0.0, 1.0, 0.0], [3, 2]))
    assert not far["quality"]["held"] and "1 of 2" in far["quality"]["what"]
    b = infer(0.5, None, [0.0] * 4, [1, 2])
    b["memory"]["peak_allocated"] = 10
    assert ab.compare(a, b)["memory"] is None  # allocator vs host RSS: not compared


def test_an_ab_of_inference_precision_through_the_console(tmp_path):
    done = run_console(tmp_path, ["/trial ab llm-infer dtype=fp32,fp16 layers=1 hidden=64 "
                                  "heads=2 kv_heads=1 vocab=256 gen=2 repeats=2 stability=0"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("*A/B*") == 1
    assert "time per request" in done.stdout and "quality held" in done.stdout
