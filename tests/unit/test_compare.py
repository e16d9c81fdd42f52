"""The stated test behind A/B and ladder verdicts (bot/fits/compare.py): a
verdict only beyond the noise, and none from trials that cannot be trusted."""
import numpy as np
import pytest

from bot.fits import compare


def report(mean, name="T1", sd=None, count=20, windows=None, contention=None, stable=None):
    """An llm-infer report as the worker writes it: latency, and where given the
    run phase's windows and the contention probe's result."""
    r = {"status": "ok", "trial": name,
         "latency": {"mean": mean, "stdev": sd if sd is not None else mean * 0.05,
                     "count": count}}
    if windows is not None:
        r["windows"] = {"unit": "request", "what": "test", "rows": windows}
    if contention is not None:
        r["contention"] = contention
    if stable is not None:
        r["stability"] = {"stable": stable, "iqr_over_median": 4.767, "count": count}
    return r


def window(mean, contended=False, count=4):
    return {"start": 0.0, "end": 1.0, "count": count, "mean": mean, "sd": mean * 0.02,
            "others_cpu": 0.6 if contended else 0.01, "contended": contended}


QUIET = {"flagged": False, "summary": None}


def trial(rng, scale, drift):
    """One trial: its own level drawn around `scale` (the drift between trials
    that a shared machine adds), five windows around that level."""
    level = scale * float(np.exp(rng.normal(0, drift)))
    return report(level, windows=[window(level * float(np.exp(rng.normal(0, 0.02))))
                                  for _ in range(5)], contention=QUIET)


def verdicts(ratio, drift=0.08, rounds=2, draws=200):
    rng = np.random.default_rng(17)
    out = []
    for _ in range(draws):
        a = [trial(rng, 0.3, drift) for _ in range(rounds)]
        b = [trial(rng, 0.3 * ratio, drift) for _ in range(rounds)]
        out.append(compare.compare(a, b)["verdict"])
    return out


def test_identical_configs_say_no_measurable_difference_about_19_times_in_20():
    got = verdicts(1.0)
    # a 95% interval excludes 1 about once in 20 by chance; the drift is between
    # trials, so a test on the windows' own spread would claim far more often
    assert got.count("same") >= 0.9 * len(got)
    assert set(got) <= {"same", "faster", "slower"}


def test_a_real_two_fold_difference_is_found():
    got = verdicts(2.0)
    assert got.count("slower") >= 0.9 * len(got)
    assert verdicts(0.5).count("faster") >= 0.9 * len(got)
    # at 15% drift between trials two rounds miss it often; three find it
    assert verdicts(2.0, drift=0.15, rounds=2).count("slower") < 0.8 * len(got)
    assert verdicts(2.0, drift=0.15, rounds=3).count("slower") >= 0.9 * len(got)


def test_the_message_states_the_test_the_interval_and_the_verdict():
    a = [report(0.312, "T1", windows=[window(0.31), window(0.314)], contention=QUIET),
         report(0.318, "T3", windows=[window(0.317), window(0.319)], contention=QUIET)]
    b = [report(0.320, "T2", windows=[window(0.32)], contention=QUIET),
         report(0.316, "T4", windows=[window(0.316)], contention=QUIET)]
    c = compare.compare(a, b)
    text = compare.phrase(c)
    assert c["verdict"] == "same" and c["low"] < 1 < c["high"]
    assert text.startswith(f"B/A ×{c['ratio']:.2f} (95% Student t interval ×")
    assert text.endswith("over 2+2 trials): no measurable difference")


def test_the_spread_between_trials_is_the_one_tested():
    # windows of each trial agree to 1%, but the two trials of each arm differ by 30%:
    # a 5% difference between the arms is inside that drift
    a = [report(0.30, "T1", windows=[window(0.30)] * 4, contention=QUIET),
         report(0.39, "T3", windows=[window(0.39)] * 4, contention=QUIET)]
    b = [report(0.315, "T2", windows=[window(0.315)] * 4, contention=QUIET),
         report(0.41, "T4", windows=[window(0.41)] * 4, contention=QUIET)]
    assert compare.compare(a, b)["verdict"] == "same"


def test_contended_windows_are_left_out_and_named():
    r = report(0.5, "T1", windows=[window(0.3), window(0.9, contended=True), window(0.3)],
               contention={"flagged": True, "summary": "busy machine: other processes used "
                                                       "61% of the CPU during the run phase"})
    t = compare.trial_time(r)
    assert t["mean"] == pytest.approx(0.3) and not t["excluded"]
    assert t["notes"] == ["T1: 1 of 3 windows contended, left out"]


def test_an_arm_whose_trials_are_all_contended_gets_no_verdict_and_what_to_run():
    busy = [report(0.3, f"T{i}", windows=[window(0.3, contended=True)] * 3,
                   contention={"flagged": True, "summary": "busy machine"}) for i in (1, 3)]
    quiet = [report(0.6, f"T{i}", windows=[window(0.6)] * 3, contention=QUIET) for i in (2, 4)]
    c = compare.compare(busy, quiet)
    assert c["verdict"] is None and c["low"] is None
    assert "A has no usable trial" in c["why"] and "every window" in c["why"]
    assert "when the machine is quiet" in c["why"]
    assert "no verdict" in compare.phrase(c)
    # an old report without windows, flagged by the probe, is left out too
    flagged = report(0.3, "T5", contention={
        "flagged": True, "summary": "busy machine: other processes used 70% of the CPU during "
        "the run phase (up to 81% over 0.5 s): these times are not the machine's own speed"})
    assert compare.trial_time(flagged)["excluded"] == (
        "T5: busy machine: other processes used 70% of the CPU during the run phase")


def test_unstable_trials_are_kept_and_marked_and_their_spread_decides():
    # A fixed count of 6 requests on a shared box is often over the 5% bound
    # even when quiet; the trials are kept, the mark is carried, and the test's
    # own spread (between trials) says whether anything is measurable.
    shaky = [report(0.3, f"T{i}", stable=False) for i in (2, 4)]
    c = compare.compare([report(0.3, "T1"), report(0.31, "T3")], shaky)
    assert c["verdict"] == "same"
    assert "T2 was UNSTABLE (IQR/median 477%)" in c["marks"]
    c = compare.compare([report(0.3, "T1"), report(0.31, "T3")],
                        [report(0.6, "T2", stable=False), report(0.61, "T4", stable=False)])
    assert c["verdict"] == "slower" and c["b"]["method"] == "between"


def test_reports_without_windows_or_contention_are_compared_and_marked_unmeasured():
    c = compare.compare([report(0.30, "T1", sd=0.01)], [report(0.60, "T2", sd=0.01)])
    assert c["verdict"] == "slower" and (c["a"]["method"], c["b"]["method"]) == ("runs", "runs")
    assert c["marks"] == ["T1: contention not measured", "T2: contention not measured"]
    # one run measures no spread: no verdict rather than a guess
    c = compare.compare([report(0.3, "T1", count=1)], [report(0.6, "T2")])
    assert c["verdict"] is None and "measured no spread" in c["why"]


def test_the_ladder_case_a_huge_step_spread_is_no_measurable_difference():
    # issue 17: a step's sd of 870 ms on a mean of 787 ms, "45% faster"
    prev = report(1.43, "T2", sd=0.05, count=3)
    step = report(0.787, "T3", sd=0.870, count=3)
    c = compare.compare([prev], [step], names=("precision", "checkpointing"))
    assert c["verdict"] == "same"
    assert compare.phrase(c).startswith("checkpointing/precision ×0.55")


def test_an_unstable_trial_whose_spread_came_with_contention_keeps_its_quiet_windows():
    # Spinners slowed one window tenfold: that alone makes IQR/median huge; the
    # quiet windows still measure the config.
    r = report(0.5, "T1", stable=False, windows=[window(0.3), window(3.0, contended=True),
                                                 window(0.3)],
               contention={"flagged": True, "summary": "busy machine"})
    t = compare.trial_time(r)
    assert not t["excluded"] and t["mean"] == pytest.approx(0.3)
    assert "T1 was UNSTABLE (IQR/median 477%)" in t["notes"]


def paired_verdicts(ratio, noise=0.08, rounds=4, drift=0.0, order="ABBA", draws=200, seed=17):
    """A/Bs run slot by slot in `order` (ABBA, or the old ABAB), each trial's level
    drawn around its arm's with `noise`, and `drift` more per slot (a machine
    growing busier): the paired test's verdicts."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        arms = ([a for i in range(rounds) for a in ("AB" if i % 2 == 0 else "BA")]
                if order == "ABBA" else list("AB" * rounds))
        slots = [trial(rng, 0.3 * (ratio if arm == "B" else 1) * (1 + drift * k), noise)
                 for k, arm in enumerate(arms)]
        pairs = [(x, y) if arms[2 * i] == "A" else (y, x)
                 for i, (x, y) in enumerate(zip(slots[0::2], slots[1::2]))]
        out.append(compare.paired(pairs)["verdict"])
    return out


def test_a_steady_drift_is_a_false_b_slower_in_abab_order_and_cancels_in_abba():
    # identical configs, the machine 4% slower each trial (about 1% noise from the
    # windows): B runs after A in every ABAB round, so each pair's difference is +4%;
    # ABBA alternates its sign
    abab = paired_verdicts(1.0, noise=0.0, drift=0.04, order="ABAB")
    abba = paired_verdicts(1.0, noise=0.0, drift=0.04)
    assert abab.count("slower") >= 0.9 * len(abab)
    assert abba.count("same") >= 0.9 * len(abba)


def test_the_paired_test_finds_a_real_difference_and_not_a_false_one():
    same = paired_verdicts(1.0)
    assert same.count("same") >= 0.9 * len(same)
    assert paired_verdicts(2.0, drift=0.03).count("slower") >= 0.95 * len(same)
    assert paired_verdicts(0.5).count("faster") >= 0.95 * len(same)
    # at 15% noise per trial, 3 pairs (t = 4.3) miss a 2× often; 4 (ab.ROUNDS) find it
    three = paired_verdicts(2.0, noise=0.15, rounds=3).count("slower") / len(same)
    four = paired_verdicts(2.0, noise=0.15, rounds=4).count("slower") / len(same)
    assert three < 0.9 <= four


def test_the_paired_verdict_states_its_pairs_and_dof_and_leaves_out_split_pairs():
    def on(worker, mean, name):
        return dict(report(mean, name, windows=[window(mean)] * 3, contention=QUIET),
                    worker=worker)
    pairs = [(on("w1", 0.30, "T1"), on("w1", 0.60, "T2")),
             (on("w1", 0.31, "T4"), on("w1", 0.61, "T3")),
             (on("w1", 0.30, "T5"), on("w2", 0.30, "T6")),
             (on("w1", 0.32, "T8"), on("w1", 0.63, "T7"))]
    c = compare.paired(pairs)
    assert c["verdict"] == "slower" and c["dof"] == 2 and c["test"] == "paired"
    assert compare.phrase(c).endswith("over 3 pairs, dof 2): B is slower")
    assert c["marks"] == ["T5 and T6 ran on different workers (w1, w2), so not side by side: "
                          "no pair"]
    # one pair left: the unpaired test on what remains, said so
    c = compare.paired(pairs[:1] + pairs[2:3])
    assert c["test"] != "paired" and "1 usable pair(s) of 2: the unpaired test" in c["marks"][-1]
