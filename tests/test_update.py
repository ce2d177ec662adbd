"""The PPO update: no separate old-log-prob forward for a micro-batch seen before the policy moves."""

import copy

import pytest
import torch

import turncredit.train.loss as loss_mod
import turncredit.train.update as update_mod
from turncredit.config import load_config
from turncredit.credit import assign_advantages
from turncredit.policy.session import PolicySession
from turncredit.train.trainer import Trainer

CFG = [
    "env.options.max_turns=2", "env.options.num_candidates=4",
    "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=5",
    "train.lr=1e-2", "train.kl=none", "train.micro_batch_size=2", "run.seed=5",
]


def _update(model, tokenizer, tmp_path, name, episodes, extra=()):
    cfg = load_config(None, CFG + list(extra))
    trainer = Trainer(cfg, tmp_path / name, session=PolicySession.from_model(model, tokenizer))
    calls = []  # every forward pass goes through the scorer (which may run a shared opening separately)
    hook = trainer.scorer.register_forward_hook(lambda *_: calls.append(1))
    try:
        stats = trainer.update(episodes)
    finally:
        hook.remove()
    return stats, len(calls)


@pytest.mark.parametrize("minibatches, passes", [(1, 2), (2, 3)])
def test_old_log_probs_of_the_first_minibatch_come_from_its_gradient_pass(
        tmp_path, tiny_policy, smol_tokenizer, monkeypatch, minibatches, passes):
    cfg = load_config(None, CFG)
    session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer)
    episodes = Trainer(cfg, tmp_path / "roll", session=session).play(1).episodes
    assign_advantages(episodes, "grpo")
    for i, ep in enumerate(episodes):  # make sure every advantage is non-zero
        for t in ep.turns:
            t.advantage = 1.0 if i % 2 else -1.0

    extra = [f"train.minibatches={minibatches}"]
    a = copy.deepcopy(tiny_policy)
    one, n_one = _update(a, smol_tokenizer, tmp_path, "one", episodes, extra)
    monkeypatch.setattr(update_mod, "needs_old_pass", lambda schedule, n: list(range(n)))
    b = copy.deepcopy(tiny_policy)
    two, n_two = _update(b, smol_tokenizer, tmp_path, "two", episodes, extra)

    micro_batches = 2  # 4 episodes, micro_batch_size 2: one per minibatch when there are two
    # one minibatch: no separate pass; two: only the second minibatch's micro-batch is scored first
    assert (n_one, n_two) == (passes, 2 * micro_batches)
    assert one.optimizer_steps == two.optimizer_steps == minibatches
    assert abs(one.loss - two.loss) < 1e-6 and abs(one.logprob_gap - two.logprob_gap) < 1e-6
    moved = 0
    for (k, pa), pb, p0 in zip(a.named_parameters(), b.parameters(), tiny_policy.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6), k
        moved += not torch.equal(pa, p0)
    assert moved
    assert one.sequence_tokens == sum(len(ep.token_ids()) for ep in episodes)
    assert 0 < one.tokens < one.sequence_tokens


def test_every_minibatch_after_the_first_is_scored_before_the_policy_moves():
    import random

    from turncredit.config import TrainConfig
    from turncredit.train.update import minibatch_schedule, needs_old_pass

    t = TrainConfig(ppo_epochs=2, minibatches=2)
    schedule = minibatch_schedule(5, t, random.Random(0))
    assert len(schedule) == 2 and all(sorted(sum(groups, [])) == list(range(5)) for groups in schedule)
    assert needs_old_pass(schedule, 5) == sorted(set(range(5)) - set(schedule[0][0]))
    assert needs_old_pass(minibatch_schedule(5, TrainConfig(), random.Random(0)), 5) == []


def _rollout(tiny_policy, smol_tokenizer, tmp_path):
    cfg = load_config(None, CFG)
    session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer)
    episodes = Trainer(cfg, tmp_path / "roll", session=session).play(1).episodes
    for i, ep in enumerate(episodes):
        for t in ep.turns:
            t.advantage = 1.0 if i % 2 else -1.0
    return episodes


def test_micro_batches_by_tokens_hold_at_most_the_budget():
    from types import SimpleNamespace

    from turncredit.config import TrainConfig
    from turncredit.train.update import micro_batches

    eps = [SimpleNamespace(token_ids=lambda n=n: [0] * n, n=n) for n in (5, 100, 40, 60, 30, 20)]
    # descending 100, 60, 40, 30, 20, 5; budget 130 padded tokens (longest × count):
    # [100] (100·2 > 130), [60, 40] (60·3 > 130), [30, 20, 5, ...] = 30·3 = 90 ≤ 130
    chunks = micro_batches(eps, TrainConfig(micro_batch_tokens=130))
    assert [[e.n for e in c] for c in chunks] == [[100], [60, 40], [30, 20, 5]]
    chunks = micro_batches(eps, TrainConfig(micro_batch_tokens=10))  # a sequence longer than the budget goes alone
    assert [len(c) for c in chunks] == [1] * 6
    assert [[e.n for e in c] for c in micro_batches(eps, TrainConfig(micro_batch_size=4))] == [[100, 60, 40, 30], [20, 5]]


def test_micro_batches_for_a_prefix_tree_go_in_token_order_and_count_each_shared_token_once():
    """A scorer that runs shared prefixes once (`ActionLogits`' tree) forwards, for episodes in
    token order, each one's tokens past its common prefix with the one before it."""
    from types import SimpleNamespace

    from turncredit.config import TrainConfig
    from turncredit.train.update import micro_batches

    opening = [1] * 50
    seqs = {"a": opening + [2] * 30, "b": opening + [3] * 40, "a2": opening + [2] * 20 + [4] * 10,
            "c": [5] * 60}
    eps = [SimpleNamespace(token_ids=lambda s=s: s, name=name) for name, s in seqs.items()]
    # token order a < a2 < b < c (a and a2 share 70 tokens, a2 and b the 50 of the opening):
    # a 80; + a2: 80 + 10 = 90; + b: 90 + 40 = 130 > 120 → new chunk; b 90, + c: 90 + 60 = 150 > 120
    chunks = micro_batches(eps, TrainConfig(micro_batch_tokens=120), shared_prefixes=True)
    assert [[e.name for e in c] for c in chunks] == [["a", "a2"], ["b"], ["c"]]
    chunks = micro_batches(eps, TrainConfig(micro_batch_tokens=130), shared_prefixes=True)
    assert [[e.name for e in c] for c in chunks] == [["a", "a2", "b"], ["c"]]
    # padded batches would hold only two of them: longest × count = 90 · 2 ≤ 180 < 90 · 3
    assert [len(c) for c in micro_batches(eps, TrainConfig(micro_batch_tokens=180))] == [2, 2]


def test_activation_checkpointing_and_token_micro_batches_leave_the_update_unchanged(
        tmp_path, tiny_policy, smol_tokenizer, monkeypatch):
    """Recomputing activations in the backward pass, and dealing the micro-batches by tokens,
    change memory, not the result: the same loss and gradient (compared before Adam, whose first
    step is ±lr for any non-zero gradient, so float noise in a tiny gradient could flip it)."""
    episodes = _rollout(tiny_policy, smol_tokenizer, tmp_path)
    results = {}
    for name, extra in {"plain": [], "checkpointed": ["train.activation_checkpointing=true"],
                        "by_tokens": ["train.micro_batch_tokens=64"]}.items():
        model = copy.deepcopy(tiny_policy)
        cfg = load_config(None, CFG + extra)
        trainer = Trainer(cfg, tmp_path / name, session=PolicySession.from_model(model, smol_tokenizer))
        stats = trainer.update(episodes)
        results[name] = (model, stats)
    plain, st = results["plain"]
    assert st.optimizer_steps == 1
    assert results["checkpointed"][0].model.gradient_checkpointing  # it was switched on
    for name in ("checkpointed", "by_tokens"):
        model, other = results[name]
        assert abs(other.loss - st.loss) < 1e-5, name
        for (k, pa), pb in zip(plain.named_parameters(), model.parameters()):
            # float noise of summing in other groupings, relative to the tensor's norm: a key
            # projection's gradient is a small remainder of larger per-token terms (softmax ignores
            # a shift shared by all keys), so its rounding reached 1.4e-4 in one full-suite run;
            # a lost or mis-scaled micro-batch moves the norm by O(0.1-1)
            err = ((pa.grad - pb.grad).norm() / pa.grad.norm().clamp_min(1e-12)).item()
            assert err < 1e-3, (name, k, err)


def test_warmup_lr_rises_linearly_to_the_rate():
    from turncredit.train.schedule import warmup_lr

    assert [warmup_lr(8e-5, k, 4) for k in range(6)] == pytest.approx([2e-5, 4e-5, 6e-5, 8e-5, 8e-5, 8e-5])
    assert warmup_lr(8e-5, 0, 0) == 8e-5 and warmup_lr(8e-5, 0, 1) == 8e-5


def test_warmup_steps_from_a_ratio_of_the_run_as_verl_and_a_step_count_wins():
    from turncredit.train.schedule import warmup_steps

    # SPADER: 5 % of 300 steps × 1 epoch × 1 minibatch
    assert warmup_steps(0, 0.05, 300) == 15
    assert warmup_steps(0, 0.05, 39) == 1  # ⌊1.95⌋
    assert warmup_steps(4, 0.05, 300) == 4
    assert warmup_steps(0, 0.0, 300) == 0


def test_the_trainer_turns_a_warmup_ratio_into_optimizer_steps(tmp_path, tiny_policy, smol_tokenizer):
    cfg = load_config(None, CFG + ["train.lr_warmup_ratio=0.25", "train.steps=4", "train.minibatches=2"])
    trainer = Trainer(cfg, tmp_path / "ratio", session=PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer))
    assert trainer.warmup_steps == 2  # ⌊0.25 × 4 steps × 2 minibatches⌋
    with pytest.raises(ValueError, match="train.lr_warmup_ratio"):
        load_config(None, CFG + ["train.lr_warmup_ratio=1.5"])


def test_the_update_warms_its_rate_up_over_optimizer_steps_and_a_resume_continues(
        tmp_path, tiny_policy, smol_tokenizer):
    episodes = _rollout(tiny_policy, smol_tokenizer, tmp_path)
    cfg = load_config(None, CFG + ["train.lr_warmup_steps=4", "train.minibatches=2"])
    trainer = Trainer(cfg, tmp_path / "warm", session=PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer))
    seen = []
    trainer.optimizer.register_step_pre_hook(lambda opt, *_: seen.append(opt.param_groups[0]["lr"]))
    trainer.update(episodes)  # 2 minibatches: optimizer steps 1 and 2
    trainer.update(episodes)  # steps 3 and 4
    trainer.update(episodes)  # warm: the full rate
    assert seen == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])

    # a new optimizer that was restored with 3 steps taken goes on with the 4th rate
    again = Trainer(cfg, tmp_path / "again", session=PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer))
    again.optimizer.load_state_dict(copy.deepcopy(trainer.optimizer.state_dict()))
    for state in again.optimizer.state.values():
        state["step"] = torch.tensor(3.0)
    rates = []
    again.optimizer.register_step_pre_hook(lambda opt, *_: rates.append(opt.param_groups[0]["lr"]))
    again.update(episodes)
    assert rates == pytest.approx([1e-2, 1e-2])


def test_the_update_applies_train_dual_clip_and_logs_what_it_capped(tiny_policy, smol_tokenizer, tmp_path,
                                                                     monkeypatch):
    episodes = _rollout(tiny_policy, smol_tokenizer, tmp_path)
    seen, real = [], loss_mod.ppo_clip_loss

    def spy(*args, **kwargs):
        seen.append(kwargs["dual_clip"])
        loss, info = real(*args, **kwargs)
        return loss, {**info, "dual_clip_fraction": 0.25}

    monkeypatch.setattr(loss_mod, "ppo_clip_loss", spy)  # what `PPOLoss` calls
    stats, _ = _update(copy.deepcopy(tiny_policy), smol_tokenizer, tmp_path, "dual", episodes, ["train.dual_clip=3"])
    assert seen and set(seen) == {3.0}
    assert stats.dual_clip_fraction == pytest.approx(0.25)  # weighted like the loss over micro-batches


def test_the_update_moves_only_the_trainable_top_layers(tmp_path, tiny_policy, smol_tokenizer):
    """train.trainable_layers=1: the optimizer holds the top layer and the final norm only; one
    update changes those and leaves every frozen weight bit for bit as it was."""
    episodes = _rollout(tiny_policy, smol_tokenizer, tmp_path)
    model = copy.deepcopy(tiny_policy)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = load_config(None, CFG + ["train.trainable_layers=1"])
    trainer = Trainer(cfg, tmp_path / "top", session=PolicySession.from_model(model, smol_tokenizer))
    assert {id(p) for p in trainer.params} == {id(p) for n, p in model.named_parameters()
                                                 if n.startswith(("model.layers.1.", "model.norm."))}
    trainer.update(episodes)
    after = model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("model.layers.1.", "model.norm.")) for k in moved)
    assert any(k.startswith("model.layers.1.mlp") for k in moved)


def test_the_update_runs_the_frozen_layers_once_per_micro_batch_with_the_same_result(
        tmp_path, tiny_policy, smol_tokenizer):
    """train.trainable_layers=1 with two minibatches: π_old's pass and the gradient passes start
    from each micro-batch's trunk, so the frozen bottom layer runs once per micro-batch (three
    times without the reuse: one micro-batch is scored before its gradient pass), and the
    weights after the update are bit for bit those of the update that reruns them."""
    episodes = _rollout(tiny_policy, smol_tokenizer, tmp_path)
    results = {}
    for reuse in (True, False):
        model = copy.deepcopy(tiny_policy)
        cfg = load_config(None, CFG + ["train.trainable_layers=1", "train.minibatches=2"])
        trainer = Trainer(cfg, tmp_path / f"reuse-{reuse}", session=PolicySession.from_model(model, smol_tokenizer))
        trainer.scorer.reuse_frozen = reuse
        calls = []
        hook = model.model.layers[0].register_forward_hook(lambda *_: calls.append(1))
        try:
            stats = trainer.update(episodes)
        finally:
            hook.remove()
        results[reuse] = (model, stats, len(calls))
    (reused, st_reused, n_reused), (rerun, st_rerun, n_rerun) = results[True], results[False]
    assert st_reused.optimizer_steps == 2 and (n_reused, n_rerun) == (2, 3)
    assert st_reused.loss == st_rerun.loss
    for (k, a), b in zip(reused.state_dict().items(), rerun.state_dict().values()):
        assert torch.equal(a, b), k
