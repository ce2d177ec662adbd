"""DAgger for the SFT stage: the expert takes over the model's games, and only its turns are targets."""

from __future__ import annotations

import random

import pytest

from turncredit.chat import ChatBridge
from turncredit.envs.twenty_questions.env import TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.envs.twenty_questions.expert import ExpertQuestioner, guess
from turncredit.policy.loading import save_checkpoint
from turncredit.train.sft import _check_messages


@pytest.fixture(autouse=True)
def repo_root(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def test_the_expert_takes_over_after_a_wrong_guess_and_a_repeat() -> None:
    """The model's turns are replayed with the env's answers; from there the expert never asks
    the word already guessed wrong again, never repeats, and wins."""
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    expert = ExpertQuestioner()
    task = env.tasks("test")[5]
    _, state = env.reset(task, random.Random(3))
    wrong = next(c.word for c in state.candidates if c.word != task.data["secret"])
    prefix = [guess(wrong), guess(wrong)]

    ep = expert.play(env, task, random.Random(3), prefix=prefix)
    assert [t.action_text for t in ep.turns[:2]] == prefix
    assert [t.label for t in ep.turns[:2]] == ["No", "Repeated"]
    taken = [t.action_text for t in ep.turns[2:]]
    assert taken and guess(wrong) not in taken
    assert len(set(taken)) == len(taken) and {t.label for t in ep.turns[2:]} <= {"Yes", "No", "Finished"}
    assert ep.success
    # with no prefix the game is the expert's own, as before
    assert expert.play(env, task, random.Random(3)).to_dict() == expert.play(env, task, random.Random(3), prefix=()).to_dict()


def test_an_assistant_message_of_weight_zero_is_context_not_a_target(smol_tokenizer) -> None:
    bridge = ChatBridge(smol_tokenizer)
    chat = [{"role": "user", "content": "Play."},
            {"role": "assistant", "content": "Is it red?", "weight": 0},
            {"role": "user", "content": "No."},
            {"role": "assistant", "content": "Is it blue?"}]
    ids, mask = bridge.dialogue_ids(chat)
    first = len(bridge.opening_ids(chat[:1]))
    own = len(bridge._encode("Is it red?")) + 1
    assert mask[first:first + own] == [0] * own  # the context question and its end-of-turn token
    target = len(bridge._encode("Is it blue?")) + 1
    assert mask[-target:] == [1] * target and sum(mask) == target
    with pytest.raises(ValueError, match=r"messages\[1\]\.weight: expected 0 or 1, got 0.5"):
        bridge.dialogue_ids([chat[0], {**chat[1], "weight": 0.5}])
    with pytest.raises(ValueError, match="all with weight 0"):
        _check_messages(chat[:3], "data.jsonl:1")


def _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, *extra: str):
    from turncredit.config import load_config

    tiny = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")
    return load_config("configs/20q-main.yaml", [
        f"model.name={tiny}", "env.options.max_turns=4", "env.options.num_candidates=4", "rollout.max_new_tokens=4",
        "sft.num_demos=4", "sft.epochs=1", "sft.batch_size=4", "sft.trainable_layers=0", "run.threads=0", *extra])


def test_dagger_chats_hold_the_models_questions_as_context_then_the_experts(tmp_path, tiny_policy, smol_tokenizer,
                                                                           monkeypatch) -> None:
    """Each of the model's games becomes a chat: its first t ≥ 1 questions exactly as the model
    asked them (weight 0), then the expert's from that state (targets), answered Yes/No/Finished."""
    import turncredit.rollout
    from turncredit.policy.session import PolicySession
    from turncredit.workflows import dagger_dialogues

    cfg = _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer)
    games = []
    play = turncredit.rollout.run_episodes
    monkeypatch.setattr(turncredit.rollout, "run_episodes", lambda *a, **k: games.extend(play(*a, **k)) or games)
    chats, played = dagger_dialogues(cfg, PolicySession.from_config(cfg), 4, seed=1)

    assert len(games) == 4 and all(g.num_turns == 4 for g in games)  # the random model never wins
    assert len(chats) == 4 and played["mean_at_k"] == 0.0
    for game, chat in zip(games, chats):
        assert chat[:len(game.messages)] == game.messages
        said = [m for m in chat if m["role"] == "assistant"]
        t = sum(m.get("weight", 1) == 0 for m in said)
        assert 1 <= t < len(said) and all(m.get("weight", 1) == 0 for m in said[:t])
        assert [m["content"] for m in said[:t]] == [turn.action_text for turn in game.turns[:t]]
        replies = [m["content"] for m in chat[len(game.messages):] if m["role"] == "user"]
        assert replies[:t] == [turn.observation for turn in game.turns[:t]]
        assert all(r.split(".")[0] in ("Yes", "No") for r in replies[t:])  # the expert asks valid, new questions


def test_a_dagger_round_trains_on_the_relabelled_games_and_as_many_demonstrations(tmp_path, tiny_policy,
                                                                                 smol_tokenizer) -> None:
    from turncredit.workflows import run_sft_stage

    cfg = _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, "sft.dagger_rounds=1", "sft.dagger_games=4")
    _, summary = run_sft_stage(cfg, tmp_path / "sft")
    assert len((tmp_path / "sft" / "dagger_1.jsonl").read_text().splitlines()) == 4
    (round_,) = summary["dagger"]
    assert round_["dialogues"] == 4 and round_["steps"] == 2  # 4 chats + 4 demonstrations, batch 4, one epoch
    assert len((tmp_path / "sft" / "sft_metrics_dagger1.jsonl").read_text().splitlines()) == 2
    assert summary["steps"] == 1 + 2
    # sft.epochs=0: the round starts from model.name as it is (here the checkpoint just trained)
    cfg = _tiny_cfg(tmp_path, tiny_policy, smol_tokenizer, "sft.dagger_rounds=1", "sft.dagger_games=4", "sft.epochs=0",
                    f"model.name={tmp_path / 'sft' / 'checkpoint'}")
    _, summary = run_sft_stage(cfg, tmp_path / "dagger-only")
    assert summary["steps"] == 2 and not (tmp_path / "dagger-only" / "sft_metrics.jsonl").exists()


def test_dagger_needs_an_expert_that_can_take_over(tmp_path, tiny_policy, smol_tokenizer) -> None:
    from turncredit.config import ConfigError, load_config
    from turncredit.policy.session import PolicySession
    from turncredit.workflows import dagger_dialogues

    tiny = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")
    cfg = load_config("configs/qa-spader.yaml", [f"model.name={tiny}", "run.threads=0"])
    with pytest.raises(ConfigError, match="cannot take over a game"):
        dagger_dialogues(cfg, PolicySession.from_config(cfg), 2, seed=0)
    with pytest.raises(ConfigError, match="sft.dagger_games"):
        load_config("configs/20q-main.yaml", ["sft.dagger_games=0"])
