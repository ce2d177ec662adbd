"""Faults: retries with backoff, then an aborted (excluded, counted) episode; injected faults;
a non-finite loss skips the update instead of poisoning the weights."""

import json
import random
from collections import Counter

import pytest
import torch
from scripted import scripted_session

from turncredit.config import load_config
from turncredit.envs.base import EnvFailure, Task
from turncredit.envs.twenty_questions import TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.episode import read_episodes
from turncredit.faults import CallFailed, FaultInjector, FaultOptions, call_with_retries
from turncredit.policy.loading import tiny_model
from turncredit.train.trainer import Trainer

DOG = Task("dog", {"secret": "dog", "synset": "dog.n.01", "category": "animal", "split": "test"})


def test_call_with_retries_retries_then_gives_up():
    counts, calls = Counter(), []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise CallFailed("boom")
        return "ok"

    assert call_with_retries(flaky, "judge", retries=2, backoff=0.0, counts=counts) == "ok"
    assert counts == {"retries": 2}
    with pytest.raises(EnvFailure, match="judge failed after 2 attempt"):
        call_with_retries(lambda: (_ for _ in ()).throw(CallFailed("down")), "judge", 1, 0.0, counts)
    assert counts == {"retries": 3, "gave_up": 1}


def test_the_injector_faults_at_its_rate_reproducibly():
    a, b = FaultInjector(FaultOptions(rate=0.2, seed=7)), FaultInjector(FaultOptions(rate=0.2, seed=7))
    xs, ys = [a.draw() for _ in range(5000)], [b.draw() for _ in range(5000)]
    assert xs == ys  # the same seed faults the same calls
    assert 0.18 < sum(x is not None for x in xs) / 5000 < 0.22
    assert set(a.counts) == {"fail", "hang", "garbage"} and sum(a.counts.values()) == sum(x is not None for x in xs)
    with pytest.raises(ValueError, match="faults.kinds"):
        FaultOptions(kinds=["explode"])
    with pytest.raises(ValueError, match="faults.rate"):
        FaultOptions(rate=1.5)


@pytest.mark.parametrize("kind", ["fail", "hang", "garbage"])
def test_each_fault_kind_is_retried_then_aborts_the_episode(kind):
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(
        oracle_retries=2, oracle_backoff=0.0, faults={"rate": 1.0, "kinds": [kind], "hang_seconds": 0.01}))
    _, state = env.reset(DOG, random.Random(0))
    [res] = env.step_batch([state], ["Is it an animal?"])
    assert isinstance(res, EnvFailure) and "after 3 attempt(s)" in str(res)
    assert env.counters() == {"oracle_retries": 2, "oracle_gave_up": 1, f"faults_{kind}": 3}
    # the syntax rule answers before the oracle: no call, no fault
    _, state = env.reset(DOG, random.Random(0))
    [res] = env.step_batch([state], ["not a question"])
    assert res.label == "Invalid" and env.counters()[f"faults_{kind}"] == 3


def test_a_run_with_20_percent_oracle_faults_completes_and_counts_add_up(tmp_path, smol_tokenizer):
    questions = ["Is it an animal?", "Is it a kind of tool?", "Is it food?", "Is it a plant?"]
    cfg = load_config(None, [
        "env.options.max_turns=4", "env.options.num_candidates=4", "env.options.oracle_retries=1",
        "env.options.oracle_backoff=0.0", "env.options.faults={rate: 0.2, hang_seconds: 0.001, seed: 1}",
        "rollout.tasks_per_step=3", "rollout.group_size=4", "train.steps=3", "train.micro_batch_size=4"])
    session = scripted_session(tiny_model(smol_tokenizer, seed=0), smol_tokenizer, questions)
    trainer = Trainer(cfg, tmp_path / "run", session=session)
    history = trainer.train()
    assert [m["step"] for m in history] == [1, 2, 3]
    faults = sum(m["faults_fail"] + m["faults_hang"] + m["faults_garbage"] for m in history)
    assert faults == sum(trainer.env.injector.counts.values()) > 0
    for m in history:
        eps = read_episodes(tmp_path / "run" / "episodes" / f"step_{m['step']:05d}.jsonl")
        aborted = [ep for ep in eps if ep.aborted]
        # each injected fault was either retried or the last straw of an aborted episode
        assert m["faults_fail"] + m["faults_hang"] + m["faults_garbage"] == m["oracle_retries"] + m["oracle_gave_up"]
        assert m["aborted"] == len(aborted) == m["oracle_gave_up"]
        assert m["episodes_trained"] == m["episodes"] - m["aborted"]
        assert all("failed after 2 attempt(s)" in ep.abort_reason for ep in aborted)
    assert sum(m["aborted"] for m in history) >= 1, "pick a seed where some episode gives up"
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["oracle_retries"] == history[-1]["oracle_retries"]


def test_a_non_finite_loss_skips_the_update_and_is_logged(tmp_path, smol_tokenizer, caplog):
    cfg = load_config(None, ["env.options.max_turns=2", "rollout.tasks_per_step=2", "rollout.group_size=2",
                             "train.steps=1", "train.minibatches=2", "train.micro_batch_size=1"])
    model = tiny_model(smol_tokenizer, seed=0)
    trainer = Trainer(cfg, tmp_path / "run", session=scripted_session(model, smol_tokenizer, ["Is it an animal?"]))
    episodes = trainer.play(1).episodes
    for ep in episodes:
        for t in ep.turns:
            t.advantage = 1.0
    episodes[0].turns[0].advantage = float("nan")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = trainer.update(episodes)
    assert stats.skipped_updates == 1 and stats.optimizer_steps == 1  # only the NaN minibatch is dropped
    assert "skipped an optimizer step" in caplog.text
    for ep in episodes:
        ep.turns[0].advantage = float("nan")
    model.load_state_dict(before)
    stats = trainer.update(episodes)
    assert stats.skipped_updates == 2 and stats.optimizer_steps == 0
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
