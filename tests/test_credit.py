"""Credit estimators on hand-computed groups (numbers worked out in the comments)."""

import math

import pytest

from turncredit.credit import (
    ESTIMATORS,
    assign_advantages,
    compute_advantages,
    group_reward_std,
    variance_filter,
)
from turncredit.episode import Episode, Task, Turn

EPS = 1e-6

# Group "a" (interleaved with the others, ragged: 2, 1 and 3 steps):
#   [1.0, 2.0] → R = 3,  [0.0] → R = 0,  [0.5, -1.0, 0.5] → R = 0
#   mean = 1, deviations (2, -1, -1), Σ dev² = 6
#   unbiased std = sqrt(6/2) = √3,  population std = sqrt(6/3) = √2
# Group "b": R = 1 and 1 → std 0 → advantage 0.   Group "c": one trajectory → 0.
GROUP_IDS = ["a", "b", "a", "c", "b", "a"]
STEP_REWARDS = [[1.0, 2.0], [0.5, 0.5], [0.0], [7.0], [1.0], [0.5, -1.0, 0.5]]


def test_grpo_hand_group_ragged():
    adv = compute_advantages("grpo", GROUP_IDS, STEP_REWARDS)
    hi, lo = 2 / (math.sqrt(3) + EPS), -1 / (math.sqrt(3) + EPS)  # ≈ 1.1547, -0.5774
    assert adv[0] == pytest.approx([hi, hi], abs=1e-12)
    assert adv[2] == pytest.approx([lo], abs=1e-12)
    assert adv[5] == pytest.approx([lo, lo, lo], abs=1e-12)
    assert adv[1] == [0.0, 0.0] and adv[4] == [0.0]  # zero-std group
    assert adv[3] == [0.0]  # one-trajectory group
    assert [len(a) for a in adv] == [len(r) for r in STEP_REWARDS]


def test_grpo_population_std():
    adv = compute_advantages("grpo", GROUP_IDS, STEP_REWARDS, std="population")
    # 2/√2 = √2 ≈ 1.4142,  -1/√2 ≈ -0.7071
    assert adv[0][0] == pytest.approx(2 / (math.sqrt(2) + EPS), abs=1e-12)
    assert adv[2][0] == pytest.approx(-1 / (math.sqrt(2) + EPS), abs=1e-12)


def test_grpo_mean_only():
    adv = compute_advantages("grpo", GROUP_IDS, STEP_REWARDS, normalize_std=False)
    assert adv[0] == [2.0, 2.0]  # R − mean = 3 − 1
    assert adv[2] == [-1.0] and adv[5] == [-1.0] * 3
    assert adv[1] == [0.0, 0.0] and adv[3] == [0.0]


def test_grpo_clip_range():
    adv = compute_advantages("grpo", GROUP_IDS, STEP_REWARDS, clip_range=(-0.5, 1.0))
    assert adv[0] == [1.0, 1.0]  # 1.1547 clipped to 1.0
    assert adv[2] == [-0.5]  # -0.5774 clipped to -0.5
    with pytest.raises(ValueError, match="clip_range"):
        compute_advantages("grpo", GROUP_IDS, STEP_REWARDS, clip_range=(1.0, -1.0))


def test_grpo_epsilon_outside_sqrt():
    # R = (0, 1): mean 0.5, unbiased std = sqrt(0.5) = 1/√2. With ε = 0.5:
    #   ε outside: 0.5 / (1/√2 + 0.5) = 1/(√2 + 1) = √2 − 1 ≈ 0.41421
    #   (ε inside the sqrt would give 0.5 / sqrt(0.5 + 0.5) = 0.5)
    adv = compute_advantages("grpo", ["g", "g"], [[0.0], [1.0]], epsilon=0.5)
    assert adv[1][0] == pytest.approx(math.sqrt(2) - 1, abs=1e-12)
    assert adv[0][0] == pytest.approx(1 - math.sqrt(2), abs=1e-12)


def test_grpo_std_at_most_epsilon_gives_zero():
    # R = (0, 0.1): unbiased std = 0.1/√2 ≈ 0.0707 ≤ ε = 0.1 → whole group 0
    adv = compute_advantages("grpo", ["g", "g"], [[0.0], [0.1]], epsilon=0.1)
    assert adv == [[0.0], [0.0]]


def test_rloo_hand_group():
    # group "a" returns (3, 0, 0):  3 − (0+0)/2 = 3,  0 − (3+0)/2 = −1.5 (twice)
    adv = compute_advantages("rloo", GROUP_IDS, STEP_REWARDS)
    assert adv[0] == [3.0, 3.0]
    assert adv[2] == [-1.5] and adv[5] == [-1.5] * 3
    assert adv[1] == [0.0, 0.0] and adv[4] == [0.0]  # equal returns
    assert adv[3] == [0.0]  # one-trajectory group


def test_unknown_estimator_lists_known():
    with pytest.raises(KeyError, match="unknown credit estimator 'nope'.*grpo.*rloo"):
        compute_advantages("nope", ["a"], [[1.0]])


def test_unknown_option_names_option_and_estimator():
    with pytest.raises(TypeError, match=r"'grpo'.*\['gamma'\]"):
        compute_advantages("grpo", ["a"], [[1.0]], gamma=0.9)
    with pytest.raises(TypeError, match=r"'rloo'.*\['epsilon'\]"):
        compute_advantages("rloo", ["a"], [[1.0]], epsilon=0.1)


def test_ragged_length_mismatch_and_bad_rewards():
    with pytest.raises(ValueError, match="group_ids has 2 entries but step_rewards has 1"):
        compute_advantages("grpo", ["a", "a"], [[1.0]])
    with pytest.raises(ValueError, match=r"step_rewards\[1\]\[0\] must be finite"):
        compute_advantages("grpo", ["a", "a"], [[1.0], [float("nan")]])
    with pytest.raises(ValueError, match=r"step_rewards\[0\] must be a list"):
        compute_advantages("grpo", ["a"], [1.0])


def test_empty_trajectory_keeps_ragged_shape():
    # an episode with no steps has R = 0 and gets an empty advantage list
    adv = compute_advantages("grpo", ["g", "g"], [[], [2.0]], normalize_std=False)
    assert adv == [[], [1.0]]  # mean 1: 2 − 1 = 1


def test_registered_estimator_must_return_ragged_shape():
    @ESTIMATORS.register("_broken_for_test")
    def broken(group_ids, step_rewards):
        return [[0.0] for _ in step_rewards]

    try:
        with pytest.raises(RuntimeError, match="shape"):
            compute_advantages("_broken_for_test", ["a"], [[1.0, 2.0]])
    finally:
        ESTIMATORS._items.pop("_broken_for_test")


def _ep(group: str, rewards: list[float], aborted: bool = False) -> Episode:
    turns = [Turn(prompt_ids=[1], action_ids=[2], sampler_logprobs=[-0.1], action_text="q?",
                  reward=r) for r in rewards]
    return Episode(task=Task("t"), group_id=group, messages=[], turns=turns, aborted=aborted)


def test_assign_advantages_excludes_aborted():
    # live returns (3, 0): mean 1.5, unbiased std = sqrt(2·1.5²/1) = 1.5·√2
    # A = ±1.5 / (1.5√2 + ε) ≈ ±0.7071. With the aborted R = 10 included it would differ.
    eps = [_ep("g", [1.0, 2.0]), _ep("g", [10.0], aborted=True), _ep("g", [0.0])]
    assign_advantages(eps, "grpo")
    a = 1.5 / (1.5 * math.sqrt(2) + EPS)
    assert [t.advantage for t in eps[0].turns] == pytest.approx([a, a], abs=1e-12)
    assert [t.advantage for t in eps[2].turns] == pytest.approx([-a], abs=1e-12)
    assert eps[1].turns[0].advantage == 0.0


def test_assign_advantages_passes_options():
    eps = [_ep("g", [3.0]), _ep("g", [1.0])]
    assign_advantages(eps, "grpo", normalize_std=False)
    assert [eps[0].turns[0].advantage, eps[1].turns[0].advantage] == [1.0, -1.0]
    with pytest.raises(TypeError, match="unknown option"):
        assign_advantages(eps, "rloo", normalize_std=False)


def _filter_batch() -> list[Episode]:
    # totals per group (unbiased std):  A (1, 1) → 0;  B (0, 2) → √2;
    #                                   C (0, 1) → √0.5;  D (5, 3) → √2 (ties B, B first)
    return [_ep("A", [1.0]), _ep("B", [0.0]), _ep("C", [0.0]), _ep("D", [2.0, 3.0]),
            _ep("B", [2.0]), _ep("A", [0.5, 0.5]), _ep("C", [1.0]), _ep("D", [3.0])]


def test_group_reward_std_hand_case():
    stds = group_reward_std(_filter_batch())
    assert list(stds) == ["A", "B", "C", "D"]
    assert stds["A"] == 0.0
    assert stds["B"] == pytest.approx(math.sqrt(2))
    assert stds["C"] == pytest.approx(math.sqrt(0.5))
    assert stds["D"] == pytest.approx(math.sqrt(2))
    assert group_reward_std(_filter_batch(), std="population")["B"] == pytest.approx(1.0)


def test_variance_filter_keeps_top_groups_in_order():
    batch = _filter_batch()
    groups = lambda eps: [e.group_id for e in eps]  # noqa: E731
    # 0.25 × 4 = 1 group: B and D tie at √2, B appeared first
    assert groups(variance_filter(batch, 0.25)) == ["B", "B"]
    # ceil(0.6 × 4) = 3 groups: B, D, C — episodes come back in original order
    kept = variance_filter(batch, 0.6)
    assert groups(kept) == ["B", "C", "D", "B", "C", "D"]
    assert kept[0] is batch[1]
    assert variance_filter(batch, 1.0) == batch
    with pytest.raises(ValueError, match="keep_fraction"):
        variance_filter(batch, 0.0)


def test_variance_filter_ignores_aborted_in_std():
    # E: live totals (1, 1) → std 0; the aborted 9.0 must not make E look informative
    batch = [_ep("E", [1.0]), _ep("E", [9.0], aborted=True), _ep("E", [1.0]),
             _ep("F", [0.0]), _ep("F", [1.0])]
    assert group_reward_std(batch)["E"] == 0.0
    assert [e.group_id for e in variance_filter(batch, 0.5)] == ["F", "F"]
