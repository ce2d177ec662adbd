"""SPA advantages and SPADER's diversity reward on hand-computed cases."""

import math

import pytest

from turncredit.credit import compute_advantages
from turncredit.envs.multi_answer_qa import QARecord
from turncredit.episode import Episode, Task, Turn
from turncredit.rewards import diversity_rewards, query_cost
from turncredit.rewards.shapers import diversity_shaper

EPS = 1e-6


def test_spa_on_ragged_group_with_finished_trajectory_and_singleton():
    adv = compute_advantages("spa", group_ids=["q1", "q1", "q2"],
                             step_rewards=[[0.2, 1.0], [0.0], [0.5, 0.0, 0.7]], gamma=0.9)
    # q1: G_A = [0.2 + 0.9·1.0, 1.0] = [1.1, 1.0]; G_B = [0.0], then 0 once finished
    # t=0: values [1.1, 0.0], μ = 0.55, population Var = 0.3025
    a0 = 0.55 / math.sqrt(0.3025 + EPS)
    # t=1: values [1.0, 0.0 (finished)], μ = 0.5, Var = 0.25
    a1 = 0.5 / math.sqrt(0.25 + EPS)
    assert adv[0] == pytest.approx([a0, a1], abs=1e-12)
    assert adv[1] == pytest.approx([-a0], abs=1e-12)
    assert adv[2] == [0.0, 0.0, 0.0]  # one-trajectory group


def test_spa_gamma_and_mean_only_option():
    # G_A = [1 + γ·0 + γ²·2, 0 + γ·2, 2] with γ = 0.5 → [1.5, 1.0, 2.0]; G_B = [1.0, 0, 0]
    adv = compute_advantages("spa", group_ids=["g", "g"], step_rewards=[[1.0, 0.0, 2.0], [1.0]],
                             gamma=0.5, normalize_std=False)
    # t=0: μ = 1.25 → ±0.25; t=1: [1.0, 0] μ = 0.5 → +0.5; t=2: [2.0, 0] μ = 1 → +1
    assert adv == [pytest.approx([0.25, 0.5, 1.0]), pytest.approx([-0.25])]


def test_spa_equal_returns_give_zero():
    adv = compute_advantages("spa", group_ids=["g"] * 3, step_rewards=[[0.5, 0.5]] * 3)
    assert all(a == pytest.approx([0.0, 0.0], abs=1e-9) for a in adv)


def test_spa_rejects_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        compute_advantages("spa", group_ids=["g"], step_rewards=[[1.0]], gamma=1.5)


def test_diversity_reward_rare_entities_pay_more_and_queries_cost():
    # group g: A finds X at step 0 and Y at step 1; B finds X at step 1 (X again at 2: no pay)
    # N(X) = 2, N(Y) = 1; |GT| = 2 (X, Y; gold Z is never found)
    r = diversity_rewards(
        group_ids=["g", "g"],
        gold=[["X", "Y", "Z"], ["X", "Y", "Z"]],
        retrieved=[[["X"], ["Y", "X"]], [[], ["X", "W"], ["X"]]],
        queries=[[2, 1], [1, 1, 3]],
        alpha=1.0, beta=4.0, lam=1.0, cost=0.01,
    )
    x_pay = 1.0 + 4.0 * math.exp(-1.0)  # N(X) − 1 = 1
    y_pay = 1.0 + 4.0 * math.exp(0.0)  # N(Y) − 1 = 0
    assert r[0] == pytest.approx([(x_pay - 0.02) / 3, (y_pay - 0.01) / 3])
    assert r[1] == pytest.approx([-0.01 / 3, (x_pay - 0.01) / 3, -0.03 / 3])


def test_diversity_reward_when_everyone_finds_the_same_entity():
    r = diversity_rewards(group_ids=["g"] * 3, gold=[["X", "Y"]] * 3,
                          retrieved=[[["X"]]] * 3, queries=[[1]] * 3, cost=0.0)
    same = (1.0 + 4.0 * math.exp(-2.0)) / 2  # N(X) = 3
    assert r == [[pytest.approx(same)]] * 3


def test_diversity_reward_groups_are_separate_and_empty_gold_gives_zero():
    r = diversity_rewards(group_ids=["a", "b", "c"], gold=[["X"], ["X"], []],
                          retrieved=[[["X"]], [["X"]], [["X"]]], queries=[[1], [1], [4]], cost=0.5)
    assert r[0] == r[1] == [pytest.approx(1.0 + 4.0 - 0.5)]  # alone in its group: N = 1
    assert r[2] == [0.0]


def test_diversity_reward_checks_shapes():
    with pytest.raises(ValueError, match="trajectory 0 has 2 steps in retrieved but 1 in queries"):
        diversity_rewards(group_ids=["g"], gold=[["X"]], retrieved=[[[], []]], queries=[[1]])


def test_query_cost_ramp():
    assert [query_cost(s) for s in (0, 99, 100)] == [0.0, 0.0, 0.0]
    assert query_cost(150) == pytest.approx(0.005)
    assert query_cost(200) == pytest.approx(0.01) and query_cost(999) == pytest.approx(0.01)
    assert query_cost(5, cost=0.2, warmup=0, ramp=10) == pytest.approx(0.1)


def _ep(gid, steps, answers=("X", "Y")):
    turns = [Turn([], [1], [0.0], "a", reward=r, record=QARecord(queries=q, retrieved_gold=g).to_dict())
             for g, q, r in steps]
    return Episode(task=Task("t", {"answers": [{"name": a} for a in answers]}), group_id=gid,
                   messages=[], turns=turns)


def test_diversity_shaper_adds_to_env_reward_once_and_skips_aborted():
    a = _ep("g", [(["X"], 1, 0.0), ([], 0, 0.5)])  # the answer turn's F1 = 0.5
    b = _ep("g", [(["X"], 2, 0.0)])
    dead = _ep("g", [(["X"], 1, 0.0)])
    dead.aborted = True
    for _ in range(2):  # shaping twice gives the same rewards
        diversity_shaper([a, b, dead], step=1, cost=0.01, cost_warmup=0, cost_ramp=0)
    x_pay = 1.0 + 4.0 * math.exp(-1.0)  # N(X) = 2: the aborted episode does not count
    assert a.step_rewards == pytest.approx([(x_pay - 0.01) / 2, 0.5])
    assert b.step_rewards == pytest.approx([(x_pay - 0.02) / 2])
    assert a.turns[0].env_reward == 0.0 and dead.step_rewards == [0.0]


def test_query_cost_shaper_is_the_grpo_baselines_f1_minus_c_queries_over_gold():
    from turncredit.rewards.shapers import query_cost_shaper

    a = _ep("g", [(["X"], 3, 0.0), ([], 1, 0.0), ([], 0, 0.5)])  # 4 queries, then F1 0.5; |GT| = 2
    dead = _ep("g", [(["X"], 1, 0.0)])
    dead.aborted = True
    for _ in range(2):  # idempotent
        query_cost_shaper([a, dead], step=151, cost=0.01, cost_warmup=100, cost_ramp=100)  # c = 0.005
    assert a.step_rewards == pytest.approx([-0.005 * 3 / 2, -0.005 / 2, 0.5])
    assert sum(a.step_rewards) == pytest.approx(0.5 - 0.005 * 4 / 2)
    assert dead.step_rewards == [0.0]
    query_cost_shaper([a], step=1)  # inside the warm-up: free
    assert a.step_rewards == pytest.approx([0.0, 0.0, 0.5])
