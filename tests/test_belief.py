"""ΔBelief: the probe's secret tokens, batched beliefs equal to a direct one-at-a-time forward,
the bonus formula, and the shaper inside a training step (and refused where there is no secret)."""


import pytest
import torch

from turncredit.config import ConfigError, load_config
from turncredit.envs.base import Task
from turncredit.envs.twenty_questions import TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.policy.session import PolicySession
from turncredit.rewards.belief import belief_bonus, belief_contexts, log_beliefs, probe_ids
from turncredit.rollout import SamplingParams, run_episodes
from turncredit.train.trainer import Trainer


def test_the_probe_marks_exactly_the_secrets_tokens(smol_tokenizer):
    for secret in ("dog", "ice cream", "saxophone"):
        ids, mask = probe_ids(smol_tokenizer, secret)
        assert smol_tokenizer.decode([i for i, m in zip(ids, mask) if m]).strip() == secret
        assert smol_tokenizer.decode(ids) == f"Is it '{secret}'?"


def test_belief_bonus_formula():
    log_b = [-5.0, -3.0, -4.0, -1.0]
    assert belief_bonus(log_b, won=False, lam=0.1) == pytest.approx([0.2, 0.0, 0.3])
    assert belief_bonus(log_b, won=True, lam=0.1) == pytest.approx([0.2, 0.0, 0.0])  # the winning turn: 0


def direct_log_belief(model, ids, mask):
    """One sequence, no padding, full logits: Σ log p(token) over the masked tokens."""
    x = torch.tensor([ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
    return sum(logp[p - 1, ids[p]].item() for p in range(1, len(ids)) if mask[p])


def test_batched_beliefs_equal_a_direct_unbatched_computation(tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(max_turns=3, num_candidates=4))
    tasks = [Task(w, {"secret": w, "synset": s, "category": c, "split": "test"})
             for w, s, c in (("dog", "dog.n.01", "animal"), ("ice cream", "ice_cream.n.01", "food"))]
    eps = run_episodes(env, session.backend, session.bridge, [tasks[0], tasks[1], tasks[0]], ["a", "b", "a"],
                       SamplingParams(max_new_tokens=5), seed=1)
    got = log_beliefs(tiny_policy, smol_tokenizer, session.bridge, eps, batch_size=3)
    for ep, row in zip(eps, got):
        contexts = belief_contexts(ep, session.bridge)
        assert len(row) == len(contexts) == ep.num_turns + 1
        assert contexts[0] == ep.turns[0].prompt_ids  # b_0: the opening prompt
        ids, mask = probe_ids(smol_tokenizer, ep.task.data["secret"])
        want = [direct_log_belief(tiny_policy, ctx + ids, [0] * len(ctx) + mask) for ctx in contexts]
        assert row == pytest.approx(want, abs=1e-4)


def test_a_lost_game_is_not_scored_on_the_reveal(tiny_policy, smol_tokenizer):
    """The last belief of a game lost on the turn limit is scored on the oracle's answer alone:
    the same bonus whether or not the final reply names the secret."""
    import copy

    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(max_turns=2, num_candidates=4))
    task = Task("dog", {"secret": "dog", "synset": "dog.n.01", "category": "animal", "split": "test"})
    (lost,) = [ep for ep in run_episodes(env, session.backend, session.bridge, [task] * 4, ["g"] * 4,
                                         SamplingParams(max_new_tokens=5), seed=1) if not ep.success][:1]
    last = lost.turns[-1]
    assert "The answer was dog" in last.observation and "dog" not in last.answer  # the env kept them apart
    unrevealed = copy.deepcopy(lost)
    unrevealed.turns[-1].observation, unrevealed.turns[-1].answer = last.answer, None
    a, b = log_beliefs(tiny_policy, smol_tokenizer, session.bridge, [lost, unrevealed])
    assert a == pytest.approx(b, abs=1e-6)
    assert belief_bonus(a, False, 0.1) == pytest.approx(belief_bonus(b, False, 0.1), abs=1e-7)
    # and the reveal would have changed the last belief: what scoring on the observation did
    revealed = copy.deepcopy(lost)
    revealed.turns[-1].answer = None
    (c,) = log_beliefs(tiny_policy, smol_tokenizer, session.bridge, [revealed])
    assert c[:-1] == pytest.approx(a[:-1], abs=1e-6) and abs(c[-1] - a[-1]) > 1e-4


def test_the_cia_recipe_shapes_rewards_with_beliefs_in_training(tmp_path, smol_tokenizer):
    from turncredit.policy.loading import tiny_model

    tiny_policy = tiny_model(smol_tokenizer, seed=0)  # trained below: not the shared fixture
    cfg = load_config("configs/20q-cia.yaml", [
        "env.options.max_turns=2", "env.options.num_candidates=4", "rollout.tasks_per_step=2",
        "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1", "run.threads=0"])
    assert cfg.algo.shaper_options["lam"] == 0.1  # the recipe's λ, checked below
    trainer = Trainer(cfg, tmp_path / "cia", session=PolicySession.from_model(tiny_policy, smol_tokenizer))
    episodes = trainer.play(1).episodes  # the trainer's own path: rollout, then the recipe's shaper
    for ep in episodes:
        log_b = ep.log_beliefs
        assert len(log_b) == ep.num_turns + 1
        for t, turn in enumerate(ep.turns):
            bonus = 0.1 * max(log_b[t + 1] - log_b[t], 0.0)
            assert turn.info["belief_reward"] == pytest.approx(bonus)
            assert turn.reward == pytest.approx(turn.env_reward + bonus)
    m = trainer.train()[0]
    assert m["step"] == 1 and m["episodes"] == 4


def test_belief_on_an_environment_without_a_secret_is_a_config_error(tmp_path, tiny_policy, smol_tokenizer):
    cfg = load_config("configs/qa-grpo.yaml", ["algo.reward_shaper=belief", "algo.shaper_options={}"])
    with pytest.raises(ConfigError, match="'belief' needs tasks with 'secret'"):
        Trainer(cfg, tmp_path / "x", session=PolicySession.from_model(tiny_policy, smol_tokenizer))


def test_exact_belief_shaper_pays_the_environments_gain_but_not_the_winning_turn():
    from turncredit.episode import Episode, Task, Turn
    from turncredit.rewards import SHAPERS

    def episode(gains, won):
        turns = [Turn([], [], [], "q?", reward=r, belief_gain=g) for g, r in zip(gains, [0.0, -1.0, 1.5])]
        return Episode(Task("dog", {"secret": "dog"}), "g", [], turns, success=won)

    lost, won = episode([0.5, 0.0, 1.2], False), episode([0.5, 0.0, 1.2], True)
    SHAPERS.get("exact_belief")([lost, won], 1, lam=2.0)
    assert [t.info["belief_reward"] for t in lost.turns] == pytest.approx([1.0, 0.0, 2.4])
    assert [t.info["belief_reward"] for t in won.turns] == pytest.approx([1.0, 0.0, 0.0])
    assert lost.step_rewards == pytest.approx([1.0, -1.0, 3.9])  # env reward + bonus
    SHAPERS.get("exact_belief")([lost], 2, lam=2.0)  # shaping again starts from the env reward
    assert lost.step_rewards == pytest.approx([1.0, -1.0, 3.9])
    idle = episode([0.5, 0.0, 0.0], True)  # the middle turn learnt nothing; the last one won
    SHAPERS.get("exact_belief")([idle], 1, lam=2.0, idle_cost=0.5)
    assert [t.info["belief_reward"] for t in idle.turns] == pytest.approx([1.0, -0.5, 0.0])
    with pytest.raises(ValueError, match="exact_belief: true"):
        SHAPERS.get("exact_belief")([episode([0.5, None, 1.2], False)], 1)


def test_an_idle_cost_on_the_advantage_survives_a_group_where_every_peer_was_idle():
    """Group of two, both idle on turn 2; A's turn 1 halves the list (log 2), B's turn 1 is idle.
    turn_reinforce with β = 1 centres each turn index on the group's mean:
    cost on the reward:    r = A [log2 − 0, −1], B [−1, −1] → turn 2: −1 − (−1) = 0 for both
    cost on the advantage: r = A [log2, 0],      B [0, 0]    → A [log2/2 − 0, 0 − 1], B [−log2/2 − 1, 0 − 1]"""
    import math

    from turncredit.credit import assign_advantages
    from turncredit.episode import Episode, Turn
    from turncredit.rewards import SHAPERS

    def group():
        return [Episode({"secret": "dog"}, "g", [], [Turn([], [], [], "q?", belief_gain=g) for g in gains])
                for gains in ([math.log(2), 0.0], [0.0, 0.0])]

    on_reward = group()
    SHAPERS.get("exact_belief")(on_reward, 1, lam=1.0, idle_cost=1.0)
    assign_advantages(on_reward, "turn_reinforce", baseline_weight=1.0)
    h = (math.log(2) + 1.0) / 2
    assert [[t.advantage for t in ep.turns] for ep in on_reward] == [pytest.approx([h, 0.0]), pytest.approx([-h, 0.0])]

    on_adv = group()
    SHAPERS.get("exact_belief")(on_adv, 1, lam=1.0, idle_cost=1.0, idle_cost_on="advantage")
    assert [t.advantage_penalty for t in on_adv[1].turns] == [1.0, 1.0] and on_adv[0].turns[0].advantage_penalty == 0.0
    assign_advantages(on_adv, "turn_reinforce", baseline_weight=1.0)
    h = math.log(2) / 2
    assert [[t.advantage for t in ep.turns] for ep in on_adv] == [pytest.approx([h, -1.0]), pytest.approx([-h - 1.0, -1.0])]
    SHAPERS.get("exact_belief")(on_adv, 2, lam=1.0, idle_cost=1.0)  # shaping again, on the reward: no penalty left
    assert all(t.advantage_penalty == 0.0 for ep in on_adv for t in ep.turns)
    with pytest.raises(ValueError, match="idle_cost_on must be"):
        SHAPERS.get("exact_belief")(group(), 1, idle_cost_on="return")
