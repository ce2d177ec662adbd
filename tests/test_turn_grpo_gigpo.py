"""turn_grpo and gigpo on hand-computed cases: ragged episodes, zero variance, singleton anchor
groups, one-episode groups, the outcome on every turn, and the Episode path."""

import math

import pytest

from turncredit.credit import assign_advantages, compute_advantages
from turncredit.episode import Episode, Task, Turn

EPS = 1e-6
S = math.sqrt(0.5)  # unbiased std of {0, 1}


def approx(values):
    return pytest.approx(values, abs=1e-9)


def test_turn_grpo_ragged_group_with_finished_trajectories_counting_zero():
    # group g: three trajectories of lengths 3, 1, 2
    adv = compute_advantages("turn_grpo", ["g", "g", "g"], [[1.0, 2.0, 3.0], [4.0], [1.0, 5.0]])
    # t=0: {1, 4, 1}: mean 2, unbiased std sqrt(((1)+(4)+(1))/2) = sqrt(3)
    s0 = math.sqrt(3.0)
    # t=1: {2, 0 (finished), 5}: mean 7/3, std sqrt(((1/3)² + (7/3)² + (8/3)²)/2) = sqrt(19/3)
    s1 = math.sqrt(((1 / 3) ** 2 + (7 / 3) ** 2 + (8 / 3) ** 2) / 2)
    # t=2: {3, 0, 0}: mean 1, std sqrt((4 + 1 + 1)/2) = sqrt(3)
    assert adv[0] == approx([(1 - 2) / (s0 + EPS), (2 - 7 / 3) / (s1 + EPS), (3 - 1) / (s0 + EPS)])
    assert adv[1] == approx([(4 - 2) / (s0 + EPS)])
    assert adv[2] == approx([(1 - 2) / (s0 + EPS), (5 - 7 / 3) / (s1 + EPS)])


def test_turn_grpo_zero_variance_one_episode_groups_and_mean_only():
    adv = compute_advantages("turn_grpo", ["a", "a", "solo"], [[0.5, 1.0], [0.5, 0.0], [3.0, -2.0]])
    assert adv[0] == approx([0.0, 0.5 / (S + EPS)])  # t=0 has no spread → 0
    assert adv[1] == approx([0.0, -0.5 / (S + EPS)])
    assert adv[2] == approx([3.0 / (1 + EPS), -2.0 / (1 + EPS)])  # one trajectory: mean 0, std 1
    flat = compute_advantages("turn_grpo", ["a", "a", "solo"], [[0.5, 1.0], [0.5, 0.0], [3.0, -2.0]],
                              normalize_std=False)
    assert flat == [[0.0, 0.5], [0.0, -0.5], [3.0, -2.0]]


def test_turn_grpo_outcome_on_every_turn():
    # outcomes (end-of-game rewards) 2 and 0 are already in the last turns: 2.5 = 0.5 + 2
    rewards = [[0.0, -1.0, 2.5], [0.0, 0.0]]
    adv = compute_advantages("turn_grpo", ["g", "g"], rewards, outcome_to_every_turn=True, outcomes=[2.0, 0.0],
                             normalize_std=False)
    # shaped: [2, 1, 2.5] and [0, 0]; per-turn means 1, 0.5, 1.25
    assert adv == [[1.0, 0.5, 1.25], [-1.0, -0.5]]
    with pytest.raises(ValueError, match="needs `outcomes`"):
        compute_advantages("turn_grpo", ["g"], [[1.0]], outcome_to_every_turn=True)


def test_gigpo_episode_term_plus_step_term_in_anchor_groups():
    g = 0.95
    rewards = [[0.0, 1.0], [0.0, 0.0, 0.0], [1.0]]
    obs = [["s0", "x"], ["s0", "x", "y"], ["s0"]]
    adv = compute_advantages("gigpo", ["q"] * 3, rewards, observations=obs, gamma=g, step_weight=0.5)
    # episode term over R = {1, 0, 1}: mean 2/3, unbiased std sqrt((1/9 + 4/9 + 1/9)/2) = sqrt(1/3)
    se = math.sqrt(1 / 3)
    ae = [(1 - 2 / 3) / (se + EPS), (0 - 2 / 3) / (se + EPS), (1 - 2 / 3) / (se + EPS)]
    # anchor "s0": returns-to-go {0.95, 0, 1}; anchor "x": {1, 0}; "y" is a singleton → 0
    g0 = [g * 1.0, 0.0, 1.0]
    m0 = sum(g0) / 3
    s0 = math.sqrt(sum((x - m0) ** 2 for x in g0) / 2)
    a0 = [(x - m0) / (s0 + EPS) for x in g0]
    ax = [0.5 / (S + EPS), -0.5 / (S + EPS)]
    assert adv[0] == approx([ae[0] + 0.5 * a0[0], ae[0] + 0.5 * ax[0]])
    assert adv[1] == approx([ae[1] + 0.5 * a0[1], ae[1] + 0.5 * ax[1], ae[1] + 0.0])
    assert adv[2] == approx([ae[2] + 0.5 * a0[2]])


def test_gigpo_counts_each_trajectory_once_and_groups_across_time_indices():
    # a long and a short trajectory: the episode term must not weigh the long one by its steps
    adv = compute_advantages("gigpo", ["q", "q"], [[0.0, 0.0, 0.0, 1.0], [0.0]],
                             observations=[["a", "b", "c", "d"], ["z"]], step_weight=1.0)
    ae = 0.5 / (S + EPS)
    assert adv[0] == approx([ae] * 4)  # every anchor group is a singleton: step term 0
    assert adv[1] == approx([-ae])
    # the same observation at different turn indices is one anchor group
    adv = compute_advantages("gigpo", ["q", "q"], [[0.0, 1.0], [0.0]], observations=[["a", "b"], ["b"]],
                             gamma=1.0, normalize_std=False)
    # episode: R = {1, 0} → ±0.5; anchor "b": returns-to-go {1 (t=1 of traj 0), 0 (t=0 of traj 1)}
    assert adv == [[0.5, 0.5 + 0.5], [-0.5 - 0.5]]


def test_gigpo_step_row_statistics_reproduce_verl_agent_s_default():
    """episode_stats=step_rows: a trajectory counts once per step in the episode term's mean and
    std (verl-agent's code); with normalize_std=False that is its default `mean_norm`."""
    rewards, obs = [[1.0], [0.0, 0.0, 0.0]], [["a"], ["b", "c", "d"]]  # every anchor a singleton
    # rows {1, 0, 0, 0}: mean 0.25; unbiased std sqrt((0.75² + 3·0.25²) / 3) = 0.5
    mean_norm = compute_advantages("gigpo", ["q", "q"], rewards, observations=obs, episode_stats="step_rows",
                                   normalize_std=False)
    assert mean_norm[0] == approx([0.75]) and mean_norm[1] == approx([-0.25] * 3)
    std_norm = compute_advantages("gigpo", ["q", "q"], rewards, observations=obs, episode_stats="step_rows")
    assert std_norm[0] == approx([0.75 / (0.5 + EPS)]) and std_norm[1] == approx([-0.25 / (0.5 + EPS)] * 3)
    # per trajectory (the paper, our default): {1, 0}, mean 0.5
    paper = compute_advantages("gigpo", ["q", "q"], rewards, observations=obs, normalize_std=False)
    assert paper[0] == approx([0.5]) and paper[1] == approx([-0.5] * 3)
    # one trajectory of 2 steps is 2 rows: mean = its own return, so the episode term is 0
    solo = compute_advantages("gigpo", ["solo"], [[1.0, 1.0]], observations=[["a", "b"]], episode_stats="step_rows")
    assert solo[0] == approx([0.0, 0.0])
    with pytest.raises(ValueError, match="episode_stats"):
        compute_advantages("gigpo", ["q"], [[1.0]], observations=[["a"]], episode_stats="rows")


def test_gigpo_one_episode_group_zero_variance_and_similarity():
    adv = compute_advantages("gigpo", ["solo"], [[1.0, 1.0]], observations=[["a", "a"]])
    # one trajectory: episode term R/(1+ε); its two steps share an anchor (returns-to-go 1.95, 1)
    a = [(1.95 - 1.475) / (math.sqrt(2 * 0.475 ** 2) + EPS), (1.0 - 1.475) / (math.sqrt(2 * 0.475 ** 2) + EPS)]
    assert adv[0] == approx([2.0 / (1 + EPS) + a[0], 2.0 / (1 + EPS) + a[1]])
    same = compute_advantages("gigpo", ["q", "q"], [[1.0], [1.0]], observations=[["a"], ["a"]])
    assert same == [[0.0], [0.0]]  # no spread anywhere
    near = compute_advantages("gigpo", ["q", "q"], [[1.0], [0.0]], observations=[["Is it red?"], ["Is it red ?"]],
                              similarity=0.9, normalize_std=False, gamma=1.0)
    assert near == [[1.0], [-1.0]]  # ±0.5 episode + ±0.5 step: the two observations were grouped
    exact = compute_advantages("gigpo", ["q", "q"], [[1.0], [0.0]], observations=[["Is it red?"], ["Is it red ?"]],
                               normalize_std=False, gamma=1.0)
    assert exact == [[0.5], [-0.5]]
    with pytest.raises(ValueError, match="observations"):
        compute_advantages("gigpo", ["q"], [[1.0]])


def _ep(gid, turns, won=False):
    ep = Episode(task=Task(gid), group_id=gid, messages=[{"role": "user", "content": "start"}])
    for action, reply, reward in turns:
        ep.turns.append(Turn([1], [2], [0.0], action, reply, reward, {}))
    ep.success = won
    return ep


def test_episode_path_feeds_observations_and_outcomes():
    a = _ep("g", [("Is it an animal?", "Yes.", 0.0), ("Is it a dog?", "Finished!", 1.9)], won=True)
    b = _ep("g", [("Is it an animal?", "Yes.", 0.0), ("Is it a cat?", "No.", -0.1)])
    a.turns[-1].outcome_reward = 1.9
    b.turns[-1].outcome_reward = -0.1
    assign_advantages([a, b], "gigpo", gamma=1.0, normalize_std=False)
    # turn 0 shares the state (same opening, no history): anchor with returns {1.9, -0.1}
    # turn 1 states are equal too (both asked 'Is it an animal?' and got 'Yes.')
    assert [t.advantage for t in a.turns] == pytest.approx([1.0 + 1.0, 1.0 + 1.0])
    assert [t.advantage for t in b.turns] == pytest.approx([-2.0, -2.0])
    assign_advantages([a, b], "turn_grpo", outcome_to_every_turn=True, normalize_std=False)
    # turn 0 rewards with the outcome spread: {1.9, -0.1} → ±1; turn 1: {1.9, -0.1} → ±1
    assert [t.advantage for t in a.turns] == pytest.approx([1.0, 1.0])


def test_process_grpo_pools_all_steps_of_the_group_and_sums_to_go():
    """DeepSeekMath's process supervision: normalise over every step of the group, then the
    advantage of step t is the sum of the normalised rewards from t on."""
    adv = compute_advantages("process_grpo", ["g", "g", "h", "h"], [[1.0, -1.0, 2.0], [-1.0], [0.5], [0.5, 0.5]])
    # group g pools {1, −1, 2, −1}: mean 1/4, unbiased std sqrt((9/16 + 25/16 + 49/16 + 25/16)/3) = sqrt(9/4) = 1.5
    n = [(x - 0.25) / (1.5 + EPS) for x in (1.0, -1.0, 2.0)]
    assert adv[0] == approx([n[0] + n[1] + n[2], n[1] + n[2], n[2]])
    assert adv[1] == approx([(-1.0 - 0.25) / (1.5 + EPS)])
    assert adv[2] == approx([0.0]) and adv[3] == approx([0.0, 0.0])  # group h: no spread


def test_process_grpo_gamma_zero_keeps_each_steps_own_reward():
    adv = compute_advantages("process_grpo", ["g", "g"], [[1.0, -1.0, 2.0], [-1.0]], gamma=0.0)
    assert adv[0] == approx([(x - 0.25) / (1.5 + EPS) for x in (1.0, -1.0, 2.0)])
    # an idle step (−1) is below the group's typical step wherever it falls, unlike turn_grpo,
    # where a −1 at turn 1 is compared with the other trajectory's (finished) 0 only
    assert adv[0][1] < 0 and adv[1][0] < 0
    with pytest.raises(ValueError, match="gamma"):
        compute_advantages("process_grpo", ["g"], [[1.0]], gamma=1.5)


def test_turn_reinforce_keeps_a_penalty_every_peer_paid():
    # two trajectories idle at t=1 (−1 each) and at t=0 one informative (0.7) vs one repeat (−2)
    rewards = [[0.7, -1.0, 2.0], [-2.0, -1.0]]
    assert compute_advantages("turn_reinforce", ["g", "g"], rewards) == [[0.7, -1.0, 2.0], [-2.0, -1.0]]
    half = compute_advantages("turn_reinforce", ["g", "g"], rewards, baseline_weight=0.5)
    # means: t=0 (0.7 − 2)/2 = −0.65, t=1 −1, t=2 (2 + 0 (finished))/2 = 1
    assert half[0] == approx([0.7 + 0.325, -1.0 + 0.5, 2.0 - 0.5])
    assert half[1] == approx([-2.0 + 0.325, -1.0 + 0.5])
    # the idle turn at t=1 stays negative for β < 1; turn_grpo (β = 1) cancels it
    flat = compute_advantages("turn_grpo", ["g", "g"], rewards, normalize_std=False)
    assert flat[0][1] == flat[1][1] == 0.0
    full = compute_advantages("turn_reinforce", ["g", "g"], rewards, baseline_weight=1.0)
    assert [full[0] == approx(flat[0]), full[1] == approx(flat[1])] == [True, True]
    with pytest.raises(ValueError, match="baseline_weight must be in"):
        compute_advantages("turn_reinforce", ["g"], [[1.0]], baseline_weight=1.5)
