"""Expert-guided group members: the expert continues a peer's game; only its turns are trained on."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from turncredit.chat import ChatBridge
from turncredit.envs.twenty_questions.env import TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.envs.twenty_questions.expert import guess
from turncredit.episode import Episode
from turncredit.guidance import guided_members
from turncredit.policy.loading import save_checkpoint
from turncredit.policy.scoring import pack
from turncredit.rollout import task_rng
from turncredit.train.forward import episodes_to_batch
from turncredit.train.update import OldPolicy

SEED = 11


@pytest.fixture(autouse=True)
def repo_root(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def _played(env, bridge, task, questions, gid="g0") -> Episode:
    """A policy episode as a rollout records it: these questions, with made-up sampler log-probs."""
    messages, state = env.reset(task, task_rng(SEED, task))
    ep = Episode(task=task, group_id=gid, messages=messages)
    prompt = bridge.opening_ids(messages)
    for q in questions:
        res = env.step(state, q)
        ids = bridge.action_ids(q)
        ep.turns.append(res.to_turn(q, prompt_ids=prompt, action_ids=ids, sampler_logprobs=[-0.5] * len(ids)))
        prompt = bridge.reply_ids(res.reply)
        if res.done:
            ep.success, ep.outcome = res.success, float(res.success)
            break
    return ep


def test_a_guided_member_continues_a_lost_game_with_the_expert_and_trains_only_its_turns(smol_tokenizer) -> None:
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8, max_turns=6))
    bridge = ChatBridge(smol_tokenizer)
    task = env.tasks("train")[3]
    _, state = env.reset(task, task_rng(SEED, task))
    secret = task.data["secret"]
    wrong = [c.word for c in state.candidates if c.word != secret]
    lost = _played(env, bridge, task, [guess(wrong[0])] * 6)  # a wrong guess, then five repeats
    won = _played(env, bridge, task, [guess(wrong[1]), guess(secret)])
    assert not lost.success and won.success

    (g,) = guided_members(env, bridge, [won, lost], per_group=1, rng=random.Random(0), seed=SEED)
    t = g.expert_from
    assert 1 <= t <= lost.num_turns - 1 and g.group_id == "g0"  # the lost game, taken over
    for mine, peer in zip(g.turns[:t], lost.turns[:t]):  # the peer's turns, as copies
        assert mine is not peer and (mine.prompt_ids, mine.action_ids, mine.label) == (peer.prompt_ids, peer.action_ids, peer.label)
    expert = g.turns[t:]
    assert expert and guess(wrong[0]) not in [x.action_text for x in expert]
    assert {x.label for x in expert} <= {"Yes", "No", "Finished"}
    # token for token what a rollout would hold had the policy asked the expert's questions
    assert expert[0].prompt_ids == lost.turns[t].prompt_ids
    for before, x in zip(g.turns[t - 1:], expert):
        assert x.prompt_ids == bridge.reply_ids(before.observation) and x.action_ids == bridge.action_ids(x.action_text)
    # the loss sees the expert's actions only; the update reads their log-probs as π_old's (NaN: none sampled)
    mask, n_prefix = g.action_mask(), sum(len(x.prompt_ids) + len(x.action_ids) for x in g.turns[:t])
    assert sum(mask[:n_prefix]) == 0 and sum(mask) == sum(len(x.action_ids) for x in expert)
    for x in g.turns:
        x.advantage = 1.0
    batch = episodes_to_batch([g], pad_id=0)
    assert bool(torch.isnan(batch.sampler_logprobs[batch.targets.bool()]).all())
    # no game to take over: a won game of one turn has no turn 1..T−1; no second member wanted
    assert guided_members(env, bridge, [_played(env, bridge, task, [guess(secret)])], 1, random.Random(0), SEED) == []
    # an episode file keeps where the expert came in
    assert Episode.from_dict(json.loads(json.dumps(g.to_dict()))).expert_from == t


def test_a_list_walking_takeover_guesses_the_words_the_peers_questions_left(smol_tokenizer) -> None:
    """With {early_guess_rate: 1} the expert takes over with guesses only: listed words that
    the peer's answers have not ruled out, never the peer's wrong guess again."""
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8, max_turns=12))
    bridge = ChatBridge(smol_tokenizer)
    task = env.tasks("train")[5]
    _, state = env.reset(task, task_rng(SEED, task))
    listed = [c.word for c in state.candidates]
    wrong = [w for w in listed if w != task.data["secret"]]
    lost = _played(env, bridge, task, [guess(wrong[0])] + [guess(wrong[1])] * 11)
    (g,) = guided_members(env, bridge, [lost], per_group=1, rng=random.Random(0), seed=SEED,
                          expert_options={"early_guess_rate": 1.0})
    expert = [x.action_text for x in g.turns[g.expert_from:]]
    ruled_out = {guess(wrong[0])} | ({guess(wrong[1])} if g.expert_from >= 2 else set())
    assert g.success and expert[-1] == guess(task.data["secret"])
    assert set(expert) <= {guess(w) for w in listed} - ruled_out and len(set(expert)) == len(expert)
    assert len(expert) <= 8 - len(ruled_out)


def test_expert_tokens_count_as_drawn_by_pi_old_no_gap_and_weight_one() -> None:
    """Two action tokens sampled (log-probs −1.0 and −3.0) and one an expert wrote (NaN);
    π_old = −1.5, −1.5, −2.0. TIS weights min(e^{old − sampler}, 2): e^{−0.5}, 2 (capped), 1;
    the gap |old − sampler| is averaged over the two sampled tokens only: (0.5 + 1.5) / 2."""
    batch = pack([[5, 6, 7, 8]], [[0, 1, 1, 1]], pad_id=0, advantages=[[0.0, 1.0, 1.0, 1.0]],
                 sampler_logprobs=[[0.0, -1.0, -3.0, math.nan]])
    old_lp = torch.tensor([[-1.5, -1.5, -2.0]])
    old = OldPolicy([old_lp], tis=True, tis_cap=2.0)
    got, weights = old.get(0, old_lp, batch)
    assert torch.equal(got, old_lp)
    assert torch.allclose(weights, torch.tensor([[math.exp(-0.5), 2.0, 1.0]]))
    assert old.sampled == 2 and old.gap_sum == pytest.approx(2.0) and old.gap_max == pytest.approx(1.5)


def _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, *extra: str):
    from turncredit.config import load_config

    tiny = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")
    return load_config("configs/20q-main.yaml", [
        f"model.name={tiny}", "env.options.max_turns=4", "env.options.num_candidates=4", "rollout.max_new_tokens=4",
        "rollout.tasks_per_step=2", "rollout.group_size=3", "train.steps=1", "train.save_every=0", "train.trainable_layers=0",
        "run.threads=0", "run.progress=never", *extra])


def test_a_step_with_expert_guidance_trains_on_mixed_groups(tmp_path, tiny_policy, smol_tokenizer) -> None:
    """Each group gets its guided member (the random model loses every game); the policy's
    metrics count the policy's episodes only; the step's episode file holds both."""
    from turncredit.train.trainer import Trainer

    cfg = _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, "algo.expert_guidance=1")
    (metrics,) = Trainer(cfg, run_dir=tmp_path / "run").train()
    assert metrics["episodes"] == 6 and metrics["success_rate"] == 0.0
    assert metrics["guided_episodes"] == 2 and metrics["guided_expert_turns"] >= 2
    eps = [Episode.from_dict(json.loads(line)) for line in (tmp_path / "run" / "episodes" / "step_00001.jsonl").open()]
    guided = [ep for ep in eps if ep.expert_from is not None]
    assert [ep.group_id for ep in guided] == ["s1-g0", "s1-g1"]  # after the policy's six, in group order
    assert eps[-2:] == guided
    assert all(any(x.advantage for x in ep.turns[ep.expert_from:]) for ep in guided)  # the estimator scored them


def test_the_expert_sft_loss_is_the_mean_nll_of_the_expert_tokens() -> None:
    """Targets at positions 1..3 of one row; the sampler drew position 1 (−1.0), an expert wrote
    2 and 3 (NaN). log π_θ = −0.7, −2.0, −0.5 there: Σ −log π over the expert's = 2.5."""
    from turncredit.train.loss import expert_nll

    batch = pack([[5, 6, 7, 8, 9]], [[0, 0, 1, 1, 1]], pad_id=0, sampler_logprobs=[[0.0, 0.0, -1.0, math.nan, math.nan]])
    assert batch.expert_targets.tolist() == [[False, False, True, True]]
    logprobs = torch.tensor([[0.0, -0.7, -2.0, -0.5]], requires_grad=True)
    nll = expert_nll(logprobs, batch.expert_targets)
    assert nll.item() == pytest.approx(2.5)
    nll.backward()
    assert logprobs.grad.tolist() == [[0.0, 0.0, -1.0, -1.0]]


def test_the_expert_sft_term_trains_the_expert_tokens_harder(tmp_path, tiny_policy, smol_tokenizer) -> None:
    """Same step, same episodes, μ = 0 against μ = 5: the expert's tokens end likelier with the
    SFT term (it adds μ / N_e to each one's −∇log π), and the step logs their mean NLL."""
    from turncredit.train.trainer import Trainer

    runs = {}
    for mu in (0.0, 5.0):
        cfg = _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, "algo.expert_guidance=1", f"algo.expert_sft_coef={mu}",
                        "train.lr_warmup_steps=0", "train.lr=1e-3", "train.minibatches=1")
        trainer = Trainer(cfg, run_dir=tmp_path / f"run{mu}")
        played = trainer.play(1)
        guided = [ep for ep in played.episodes if ep.expert_from is not None]
        before = _expert_logprob(trainer, guided)
        learned = trainer.learn(1, played.episodes)
        runs[mu] = (before, _expert_logprob(trainer, guided), learned.update.expert_nll)
    (b0, a0, nll0), (b5, a5, nll5) = runs[0.0], runs[5.0]
    assert b0 == pytest.approx(b5) and a5 > a0 + 0.05, runs  # measured: +0.28 against +0.18
    assert nll0 == 0.0 and nll5 == pytest.approx(-b5, rel=1e-2)  # one minibatch: scored before the step


def _expert_logprob(trainer, guided: list[Episode]) -> float:
    """Mean log π_θ of the guided members' expert tokens (their action mask holds only those)."""
    from turncredit.policy.scoring import action_logprobs

    batch = pack([ep.token_ids() for ep in guided], [ep.action_mask() for ep in guided], pad_id=trainer.session.pad_id)
    with torch.no_grad():
        logprobs, _ = action_logprobs(trainer.model, batch, trainer.cfg.rollout.temperature)
    return (logprobs.sum() / batch.targets.sum()).item()


def test_expert_guidance_needs_an_expert_that_can_take_over(tmp_path, tiny_policy, smol_tokenizer) -> None:
    from turncredit.config import ConfigError, load_config
    from turncredit.train.trainer import Trainer

    tiny = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")
    cfg = load_config("configs/qa-spader.yaml", [f"model.name={tiny}", "run.threads=0", "algo.expert_guidance=1"])
    with pytest.raises(ConfigError, match="algo.expert_guidance: the expert .* cannot take over a game"):
        Trainer(cfg, run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match="algo.expert_guidance"):
        load_config("configs/20q-main.yaml", ["algo.expert_guidance=9"])  # more than the group's 8
    with pytest.raises(ConfigError, match="algo.expert_sft_coef.*unless algo.expert_guidance > 0"):
        load_config("configs/20q-main.yaml", ["algo.expert_guidance=0", "algo.expert_sft_coef=0.5"])
    with pytest.raises(ConfigError, match="algo.guidance_expert_options.*unless algo.expert_guidance > 0"):
        load_config("configs/20q-main.yaml", ["algo.expert_guidance=0", "algo.guidance_expert_options={early_guess_rate: 1.0}"])
    cfg = load_config("configs/20q-main.yaml", [f"model.name={tiny}", "run.threads=0",
                                                "algo.guidance_expert_options={early_guess_rate: 2.0}"])
    with pytest.raises(ConfigError, match=r"algo.guidance_expert_options: early_guess_rate: expected a probability in \[0, 1\]"):
        Trainer(cfg, run_dir=tmp_path / "run2")
