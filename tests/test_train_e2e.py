"""Two real training steps with the tiny model on 20 Questions, through every stage."""

import json
import sys

import torch

from turncredit.config import load_config
from turncredit.episode import read_episodes
from turncredit.policy.loading import load_model
from turncredit.policy.session import PolicySession
from turncredit.train.trainer import Trainer

TINY = [
    "env.options.max_turns=3", "env.options.num_candidates=4",
    "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
    "train.steps=2", "train.lr=1e-3", "train.entropy_coef=0.01", "train.kl=k3", "train.kl_coef=0.1",
    "train.minibatches=2", "train.micro_batch_size=1", "run.seed=3",
]


def test_two_training_steps_change_weights_and_write_the_run(tmp_path, tiny_policy, smol_tokenizer):
    cfg = load_config(None, TINY)
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    before = {k: v.clone() for k, v in tiny_policy.state_dict().items()}
    trainer = Trainer(cfg, tmp_path / "run", session=session)
    history = trainer.train()

    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        assert torch.isfinite(torch.tensor(m["loss"]))
        assert m["episodes"] == 4 and m["tokens_generated"] > 0
        assert m["grad_norm"] > 0
    changed = [k for k, v in tiny_policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "no weight changed after two steps"

    run = tmp_path / "run"
    assert (run / "config.yaml").is_file()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]
    for key in ("reward_mean", "success_rate", "group_reward_std", "entropy", "approx_kl",
                "clip_fraction", "grad_norm", "tokens_generated", "seconds_rollout",
                "seconds_oracle", "seconds_update", "ref_kl", "logprob_gap"):
        assert key in json.loads(lines[0]), key
    first = json.loads(lines[0])
    if sys.platform.startswith("linux"):  # the process's memory, step by step
        assert 0.05 < first["rss_gb"] <= first["peak_rss_gb"]
    eps = read_episodes(run / "episodes" / "step_00001.jsonl")
    assert len(eps) == 4
    assert all(t.advantage is not None for ep in eps for t in ep.turns)
    # the group members share their task instance (same secret and candidate list)
    assert eps[0].messages == eps[1].messages and eps[0].group_id == eps[1].group_id
    ckpt = run / "checkpoint"
    assert list(ckpt.glob("*.safetensors")) and not list(ckpt.glob("*.bin"))
    reloaded = load_model(str(ckpt))
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, tiny_policy.state_dict()[k]), k


def test_same_seed_same_episodes(tmp_path, tiny_policy, smol_tokenizer):
    """Determinism: the same config and seed on CPU give the same rollouts."""
    cfg = load_config(None, TINY)
    runs = []
    for name in ("a", "b"):
        state = {k: v.clone() for k, v in tiny_policy.state_dict().items()}
        trainer = Trainer(cfg, tmp_path / name, session=PolicySession.from_model(tiny_policy, smol_tokenizer))
        eps = trainer.play(1).episodes
        runs.append([ep.token_ids() for ep in eps])
        tiny_policy.load_state_dict(state)
    assert runs[0] == runs[1]


def test_lora_training_touches_only_the_adapter_and_saves_merged(tmp_path, smol_tokenizer):
    """LoRA: the KL reference is the same weights with the adapter off; the base stays frozen."""
    from turncredit.policy.loading import add_lora, tiny_model

    model = add_lora(tiny_model(smol_tokenizer, seed=5), {"r": 4, "lora_alpha": 8})
    base_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    opts = [x for x in TINY if not x.startswith(("train.kl", "train.minibatches"))]
    cfg = load_config(None, opts + ["train.kl=k1", "train.kl_coef=0.5", "train.minibatches=1"])
    trainer = Trainer(cfg, tmp_path / "lora", session=PolicySession.from_model(model, smol_tokenizer))
    history = trainer.train()
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in base_before.items())
    assert any(not torch.equal(state[k], v) for k, v in lora_before.items())
    # the adapter starts at zero, so step 1's single update sees policy == reference; step 2 not
    assert history[0]["ref_kl"] == 0.0 and history[1]["ref_kl"] != 0.0
    merged = load_model(str(tmp_path / "lora" / "checkpoint"))
    assert not any("lora_" in k for k in merged.state_dict())


def test_an_int8_sampler_turns_on_truncated_importance_sampling(tmp_path, tiny_policy, smol_tokenizer):
    """train.tis auto is on when sampling from a copy: a cap near 0 scales every token's
    policy gradient down to nothing, while tis false leaves it whole; the gap is logged."""
    import copy

    base = TINY + ["train.steps=1", "train.kl=none", "train.kl_coef=0", "train.entropy_coef=0", "rollout.dtype=int8"]
    session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer, sampler_dtype="int8")
    (m,) = Trainer(load_config(None, base), tmp_path / "run", session=session).train()
    assert m["sampler_dtype"] == "int8" and m["seconds_sampler_refresh"] > 0  # re-quantised after the update
    assert 0 < m["logprob_gap"] <= m["logprob_gap_max"]
    episodes = read_episodes(tmp_path / "run" / "episodes" / "step_00001.jsonl")
    for i, ep in enumerate(episodes):  # the tiny model's games all score alike: give them a signal
        for t in ep.turns:
            t.advantage = 1.0 if i % 2 else -1.0
    stats = {}
    for tis, cap in (("false", 2.0), ("auto", 1e-6)):
        cfg = load_config(None, base + [f"train.tis={tis}", f"train.tis_cap={cap}"])
        session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer, sampler_dtype="int8")
        stats[tis] = Trainer(cfg, tmp_path / tis, session=session).update(episodes)
    assert stats["false"].tis_capped == 0.0 and stats["auto"].tis_capped == 1.0
    assert stats["false"].grad_norm > 0
    assert stats["auto"].grad_norm < 1e-4 * stats["false"].grad_norm
