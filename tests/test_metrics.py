"""Pass@k / Mean@k on hand-computed tables."""

import math

import pytest

from turncredit.metrics import mean_std, pass_at_k, success_summary, bootstrap_interval, paired_difference, per_task_success, seed_word_bootstrap


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 − C(2,2)/C(4,2) = 1 − 1/6
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # k = 1 is the success rate
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # n − c = 1 < k: any 2 samples contain a success
    assert pass_at_k(128, 1, 8) == pytest.approx(8 / 128)  # 1 − (127 choose 8)/(128 choose 8)


def test_pass_at_k_errors():
    with pytest.raises(ValueError, match="k=5 is larger than the number of samples n=4"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c must be in"):
        pass_at_k(4, 5, 2)


# k = 2;  first two samples:  cat (T, F)  dog (F, F)  sun (T, T)
#   mean_at_k = (1 + 0 + 0 + 0 + 1 + 1)/6 = 0.5
#   per-index rates over tasks: j=0 → 2/3, j=1 → 1/3 → population std = 1/6
#   pass@2 with all 4 samples: cat c=3 → 1.0;  dog c=0 → 0;  sun c=2 → 1 − 1/6 = 5/6
#   pass_at_k = (1 + 0 + 5/6)/3 = 11/18
TABLE = {
    "cat": [True, False, True, True],
    "dog": [False, False, False, False],
    "sun": [True, True, False, False],
}


def test_success_summary_hand_table():
    s = success_summary(TABLE, k=2)
    assert s["mean_at_k"] == pytest.approx(0.5)
    assert s["mean_at_k_std"] == pytest.approx(1 / 6)
    assert s["pass_at_k"] == pytest.approx(11 / 18)
    assert (s["n_tasks"], s["n_samples"], s["k"]) == (3, 12, 2)


def test_success_summary_names_short_task():
    with pytest.raises(ValueError, match="task 'dog' has 1 samples, expected at least k=2"):
        success_summary({"cat": [True, False], "dog": [True]}, k=2)


def test_mean_std():
    mu, sd = mean_std([1.0, 2.0, 3.0, 4.0])  # μ = 2.5, σ² = (2.25+0.25+0.25+2.25)/4 = 1.25
    assert (mu, sd) == pytest.approx((2.5, math.sqrt(1.25)))
    with pytest.raises(ValueError, match="empty"):
        mean_std([])


# ---------------------------------------------------------------- bootstrap intervals


def test_bootstrap_interval_hand_computed_two_tasks():
    """Two tasks scoring 0 and 1: a resampled mean is 0, ½ or 1 with probability ¼, ½, ¼. The
    95 % interval's quantiles (2.5 %, 97.5 %) fall in the outer atoms: [0, 1]; a 40 % interval
    (30 %, 70 %) falls inside the middle atom: [½, ½]."""
    assert bootstrap_interval([0.0, 1.0], level=0.95, resamples=20_000) == (0.0, 1.0)
    assert bootstrap_interval([0.0, 1.0], level=0.40, resamples=20_000) == (0.5, 0.5)
    assert bootstrap_interval([0.25] * 7) == (0.25, 0.25)  # no spread, no width
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_interval([])


def test_paired_difference_cancels_word_difficulty():
    """Every word gains exactly 0.25: the paired interval is that point, although each model's
    own interval is wide (the words differ a lot in difficulty)."""
    before = {"a": 0.0, "b": 0.25, "c": 0.75, "d": 0.5}
    after = {w: v + 0.25 for w, v in before.items()}
    d = paired_difference(before, after)
    assert d["difference"] == pytest.approx(0.25) and d["interval"] == pytest.approx([0.25, 0.25])
    lo, hi = bootstrap_interval(list(after.values()))
    assert hi - lo > 0.3
    with pytest.raises(ValueError, match="different tasks.*e"):
        paired_difference(before, {**after, "e": 1.0})


def test_per_task_success_uses_the_first_k_samples():
    assert per_task_success({"x": [True, False, True, True], "y": [False, False]}, k=2) == {"x": 0.5, "y": 0.0}


def test_seed_word_bootstrap_resamples_seeds_of_each_table_on_their_own():
    """One word, two seeds scoring 0 and 1: resampled seed means are 0, ½, 1 w.p. ¼, ½, ¼ (as
    for words above). Against a one-seed table the difference keeps that spread: seeds are not
    paired across tables, words are."""
    seeds = [[0.0], [1.0]]
    assert seed_word_bootstrap([seeds], [1.0], level=0.95, resamples=20_000) == (0.0, 1.0)
    assert seed_word_bootstrap([seeds], [1.0], level=0.40, resamples=20_000) == (0.5, 0.5)
    assert seed_word_bootstrap([[[0.25]], seeds], [-1.0, 1.0], level=0.95, resamples=20_000) == (-0.25, 0.75)
    d = paired_difference({"w": 0.25}, [{"w": 0.0}, {"w": 1.0}])
    assert d["difference"] == pytest.approx(0.25) and d["n_runs"] == [1, 2]
    with pytest.raises(ValueError, match="different numbers of words"):
        seed_word_bootstrap([[[0.0, 1.0]], [[1.0]]], [1.0, 1.0])
