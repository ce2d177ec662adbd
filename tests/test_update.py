"""The PPO update: one forward per micro-batch when the policy cannot have moved."""

import copy

import torch

import turncredit.train.trainer as trainer_mod
from turncredit.config import load_config
from turncredit.credit import assign_advantages
from turncredit.policy.session import PolicySession
from turncredit.train.trainer import Trainer

CFG = [
    "env.options.max_turns=2", "env.options.num_candidates=4",
    "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=5",
    "train.lr=1e-2", "train.kl=none", "train.micro_batch_size=2", "run.seed=5",
]


def _update(model, tokenizer, tmp_path, name, episodes):
    trainer = Trainer(load_config(None, CFG), tmp_path / name, session=PolicySession.from_model(model, tokenizer))
    calls = []  # every forward pass starts at the embedding
    hook = model.get_input_embeddings().register_forward_hook(lambda *_: calls.append(1))
    try:
        stats = trainer.update(episodes)
    finally:
        hook.remove()
    return stats, len(calls)


def test_single_pass_update_equals_the_two_pass_update_with_half_the_forwards(
        tmp_path, tiny_policy, smol_tokenizer, monkeypatch):
    cfg = load_config(None, CFG)
    session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer)
    episodes, _ = Trainer(cfg, tmp_path / "roll", session=session).rollout(1)
    assign_advantages(episodes, "grpo")
    for i, ep in enumerate(episodes):  # make sure every advantage is non-zero
        for t in ep.turns:
            t.advantage = 1.0 if i % 2 else -1.0

    a = copy.deepcopy(tiny_policy)
    one, n_one = _update(a, smol_tokenizer, tmp_path, "one", episodes)
    monkeypatch.setattr(trainer_mod, "reuse_gradient_pass", lambda t: False)
    b = copy.deepcopy(tiny_policy)
    two, n_two = _update(b, smol_tokenizer, tmp_path, "two", episodes)

    micro_batches = 2  # 4 episodes, micro_batch_size 2
    assert (n_one, n_two) == (micro_batches, 2 * micro_batches)
    assert one.optimizer_steps == two.optimizer_steps == 1
    assert abs(one.loss - two.loss) < 1e-6 and abs(one.logprob_gap - two.logprob_gap) < 1e-6
    moved = 0
    for (k, pa), pb, p0 in zip(a.named_parameters(), b.parameters(), tiny_policy.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6), k
        moved += not torch.equal(pa, p0)
    assert moved
    assert one.sequence_tokens == sum(len(ep.token_ids()) for ep in episodes)
    assert 0 < one.tokens < one.sequence_tokens
