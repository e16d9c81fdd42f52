"""The command parsers under arbitrary text (hypothesis): no exception escapes,
bad input creates nothing, and every refusal names what is wrong."""
import datetime as dt
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot import commands
from bot.app.runtime import context
from bot.store import Store

KEYS = ["batch", "prompt", "gen", "dtype", "layers", "hidden", "seq", "steps", "world", "zero",
        "precision", "budget", "plan", "block", "repeats", "timeout", "", "=", "x"]
VALUES = ["0", "-1", "1e12", "nan", "inf", "-inf", "NaN", "1.5", "", "=", "'", '"', "$(rm -rf /)",
          "`id`", ";ls", "|", "&&", "\u202e", "😀", "9" * 40, "1,2,,4", "bf16", "fp8", "24GB",
          "x" * 10000]
HEADS = ["", "llm-infer", "llm-train", "sweep llm-infer", "ladder llm-train", "ab llm-infer",
         "fit S1", "status", "cancel", "list", "workers", "recipe", "help", "sweep", "ab"]

word = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(VALUES)),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.text(max_size=30)),
    st.text(alphabet=string.printable, max_size=20),
    st.text(max_size=20))
command_text = st.one_of(
    st.builds(lambda h, ws: " ".join([h, *ws]), st.sampled_from(HEADS),
              st.lists(word, max_size=6)),
    st.text(max_size=200),
    st.sampled_from(["x" * 10000, "'", '"unclosed', "batch=", "=4", "==", "\x00", "\n\n"]))

FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return context(Store(str(tmp_path_factory.mktemp("fuzz") / "f.db")))


def _jobs(ctx) -> int:
    return ctx.store.db.execute("select count(*) from jobs").fetchone()[0]


@FUZZ
@given(text=command_text)
def test_trial_never_raises_and_bad_input_creates_nothing(ctx, text):
    before = _jobs(ctx)
    reply, job = commands.trial(ctx, text, "U1", "C1")
    assert reply["response_type"] == "ephemeral" and reply["text"]
    if job is None:
        assert _jobs(ctx) == before, (text, reply["text"])
    if reply["text"].startswith(":x:") and "Nothing was queued" in reply["text"]:
        # the refusal names the offending word (in backticks) or the usage
        assert re.search(r"`[^`]*`", reply["text"]), reply["text"]


@FUZZ
@given(text=st.one_of(
    st.builds(lambda h, ws: " ".join([h, *ws]),
              st.sampled_from(["", "new", "demo", "demo block", "demo set", "price", "prices",
                               "digest", "digest weekly", "demo actual", "demo lock", "help"]),
              st.lists(word, max_size=6)),
    st.text(max_size=200)))
def test_plan_never_raises_or_falls_back_to_the_last_resort(ctx, text):
    reply = commands.plan(ctx, text, "U1", "C1", dt.date(2026, 12, 1))
    assert reply["text"] and "Something went wrong" not in reply["text"], text


@given(st.text(alphabet=string.printable + "é한 \u3000", max_size=80))
@settings(max_examples=300, deadline=None)
def test_the_fast_split_gives_shlexs_words(text):
    """/trial splits unquoted text without shlex (an ack's path); the words are shlex's."""
    import shlex

    from bot.trials import parse
    from worker.spec import SpecError
    try:
        want = shlex.split(text)
    except ValueError:
        with pytest.raises(SpecError):
            parse.split(text)
        return
    assert parse.split(text) == want


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
@settings(max_examples=300, deadline=None)
def test_ascii_text_is_normalized_as_the_full_fold_does(text):
    """normalize's ASCII shortcut (an ack's path) gives what NFKC and the folds give."""
    from bot import words
    assert words.normalize(text) == words._fold(text)
