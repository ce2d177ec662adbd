"""Exact resume: 4 steps in one go equal 2 steps, a kill, and 2 resumed steps, bit for bit on CPU."""

import copy
import json
import os

import pytest
import torch

from turncredit.config import ConfigError, load_config
from turncredit.policy.loading import add_lora, tiny_model
from turncredit.policy.session import PolicySession
from turncredit.train.checkpoint import CheckpointError, latest_checkpoint, read_state
from turncredit.train.trainer import Trainer

TINY = [
    "env.options.max_turns=3", "env.options.num_candidates=4",
    "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
    "train.steps=4", "train.lr=1e-3", "train.entropy_coef=0.01", "train.kl=k3", "train.kl_coef=0.1",
    "train.minibatches=2", "train.micro_batch_size=1", "train.save_every=1", "train.keep_last=2", "run.seed=3",
]
TIMING = ("seconds_", "update_tokens_per_s", "rss_gb", "peak_rss_gb")  # measured, not computed: differ run to run


def untimed(m):
    return {k: v for k, v in m.items() if not k.startswith(TIMING)}


def metrics(run):
    return [untimed(json.loads(x)) for x in (run / "metrics.jsonl").read_text().splitlines()]


def session_of(model, tokenizer):
    return PolicySession.from_model(copy.deepcopy(model), tokenizer)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_four_steps_equal_two_killed_and_two_resumed(tmp_path, smol_tokenizer, lora):
    start = tiny_model(smol_tokenizer, seed=1)
    if lora:
        start = add_lora(start, {"r": 4, "lora_alpha": 8})
    overrides = TINY + (["train.kl=k1"] if lora else [])
    cfg = load_config(None, overrides)

    straight = Trainer(cfg, tmp_path / "straight", session=session_of(start, smol_tokenizer))
    straight.train()

    killed = Trainer(cfg, tmp_path / "resumed", session=session_of(start, smol_tokenizer))
    steps = killed.train_iter()
    next(steps), next(steps)  # two steps done, then the process "dies" mid-run
    (tmp_path / "resumed" / "metrics.jsonl").open("a").write('{"step": 3, "rew')  # a torn line
    del killed, steps

    resumed = Trainer(cfg, tmp_path / "resumed", session=session_of(start, smol_tokenizer), resume=True)
    assert resumed.step_idx == 2 and resumed.resumed_from.name == "checkpoint_step00002"
    resumed.train()

    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert metrics(tmp_path / "straight") == metrics(tmp_path / "resumed")
    for step in range(1, 5):
        name = f"episodes/step_{step:05d}.jsonl"
        assert (tmp_path / "straight" / name).read_text() == (tmp_path / "resumed" / name).read_text()
    # optimizer moments too: a fifth step would diverge otherwise
    for pa, pb in zip(straight.params, resumed.params, strict=True):
        sa, sb = straight.optimizer.state[pa], resumed.optimizer.state[pb]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    # the last `keep_last` step checkpoints and the final one remain
    names = sorted(d.name for d in (tmp_path / "resumed").iterdir() if d.name.startswith("checkpoint"))
    assert names == ["checkpoint", "checkpoint_step00002", "checkpoint_step00003"]
    assert read_state(tmp_path / "resumed" / "checkpoint")["step"] == 4


def test_resume_ignores_a_partial_checkpoint_and_rejects_a_changed_config(tmp_path, smol_tokenizer):
    start = tiny_model(smol_tokenizer, seed=1)
    cfg = load_config(None, TINY + ["train.steps=1", "train.kl=none", "train.kl_coef=0"])
    run = tmp_path / "run"
    Trainer(cfg, run, session=session_of(start, smol_tokenizer)).train()
    # a kill in the middle of writing step 2's checkpoint leaves only a temp folder
    partial = run / ".checkpoint_step00002.tmp-dead"
    partial.mkdir()
    (partial / "trainable.safetensors").write_bytes(b"\0" * 10)
    assert latest_checkpoint(run).name == "checkpoint"
    more = load_config(None, TINY + ["train.steps=2", "train.kl=none", "train.kl_coef=0"])
    t = Trainer(more, run, session=session_of(start, smol_tokenizer), resume=True)
    assert t.step_idx == 1 and not partial.exists()
    assert [m["step"] for m in t.train()] == [2]

    other = load_config(None, TINY + ["train.steps=3", "train.kl=none", "train.kl_coef=0", "train.lr=0.5"])
    with pytest.raises(ConfigError, match="train.lr"):
        Trainer(other, run, session=session_of(start, smol_tokenizer), resume=True)
    with pytest.raises(ConfigError, match="--overwrite"):
        Trainer(more, run, session=session_of(start, smol_tokenizer))


def test_a_corrupt_checkpoint_is_a_one_line_error_naming_the_file(tmp_path, smol_tokenizer):
    start = tiny_model(smol_tokenizer, seed=1)
    cfg = load_config(None, TINY + ["train.steps=1", "train.kl=none", "train.kl_coef=0"])
    run = tmp_path / "run"
    Trainer(cfg, run, session=session_of(start, smol_tokenizer)).train()
    bad = run / "checkpoint" / "optimizer.safetensors"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="optimizer.safetensors: corrupt"):
        Trainer(cfg, run, session=session_of(start, smol_tokenizer), resume=True)
    # the wrong model for the checkpoint
    lora = add_lora(tiny_model(smol_tokenizer, seed=1), {"r": 4, "lora_alpha": 8})
    os.remove(bad)
    with pytest.raises(CheckpointError, match="optimizer.safetensors is missing"):
        Trainer(cfg, run, session=session_of(start, smol_tokenizer), resume=True)
    with pytest.raises(CheckpointError, match="do not match the model"):
        Trainer(cfg, run, session=session_of(lora, smol_tokenizer), resume=True)
