"""The expert questioner: best-split choice, phrasing the oracle parses, and winning games."""

from __future__ import annotations

import random

import pytest

from turncredit.envs.base import Task
from turncredit.envs.twenty_questions.env import TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.envs.twenty_questions.expert import ExpertQuestioner, article, entropy, guess, phrase
from turncredit.envs.twenty_questions.oracle import WordNetOracle
from turncredit.envs.twenty_questions.words import SecretWord as S
from turncredit.episode import read_episodes, write_episodes

DOG, CAT, MOUSE, PIANO = (
    S("dog", "dog.n.01", "animal"),
    S("cat", "cat.n.01", "animal"),
    S("mouse", "mouse.n.01", "animal"),
    S("piano", "piano.n.01", "artifact"),
)


@pytest.fixture(scope="module")
def expert() -> ExpertQuestioner:
    return ExpertQuestioner()


def test_hand_computed_best_split(expert: ExpertQuestioner) -> None:
    # dog, cat, mouse are animals/mammals (3 of 4: 3-1 split); piano alone is an artifact (1-3);
    # only "carnivore" (dog, cat — the mouse is a rodent) splits the four 2-2: one full bit.
    cands = [DOG, CAT, MOUSE, PIANO]
    assert expert.best_key(cands) == "carnivore"
    assert expert.best_key(list(reversed(cands))) == "carnivore"  # order does not matter
    q = expert.next_question(cands)
    assert q == "Is it a kind of carnivore?"
    assert expert.update(cands, q, "Yes") == [DOG, CAT]
    assert expert.update(cands, q, "No") == [MOUSE, PIANO]
    assert expert.update(cands, q, "Invalid") == cands
    assert entropy(2, 4) == 1.0 and entropy(3, 4) < 1.0 and entropy(0, 4) == 0.0


def test_asked_keys_are_not_asked_again(expert: ExpertQuestioner) -> None:
    assert expert.best_key([DOG, CAT, MOUSE, PIANO], asked={"carnivore"}) != "carnivore"


def test_guesses_when_one_candidate_or_no_split(expert: ExpertQuestioner) -> None:
    assert expert.next_question([PIANO]) == "Is it a piano?"
    assert expert.next_question([S("apple", "apple.n.01", "food")]) == "Is it an apple?"
    # two candidates: any split is 1-1, so asking a category cannot beat guessing one of them
    assert expert.next_question([DOG, PIANO]) in {"Is it a dog?", "Is it a piano?"}
    # last turn: only a guess can win
    assert expert.next_question([DOG, CAT, MOUSE, PIANO], turns_left=1).startswith("Is it a ")
    assert "kind of" not in expert.next_question([DOG, CAT, MOUSE, PIANO], turns_left=1)


def test_phrasing_round_trips_through_the_oracle() -> None:
    oracle = WordNetOracle()
    for key in ["animal", "musical_instrument", "edible_fruit", "artifact", "body_part", "hand_tool"]:
        assert oracle.parse(phrase(key)) == key
    assert article("apple") == "an" and article("unicorn") == "a" and article("hour") == "an"
    assert article("dog") == "a" and article("umbrella") == "an"


def _check_episode(ep, task: Task, env: TwentyQuestionsEnv, group_id: str = "") -> None:
    assert ep.success and ep.outcome == 1.0 and not ep.truncated
    assert ep.task == task and ep.group_id == (group_id or task.task_id)
    assert [m["role"] for m in ep.messages] == ["system", "user"]
    assert 1 <= ep.num_turns <= env.max_turns
    for t in ep.turns:
        assert t.prompt_ids == [] and t.action_ids == [] and t.sampler_logprobs == []
        assert t.action_text.endswith("?") and t.label in {"Yes", "No", "Finished"}
    assert ep.turns[-1].label == "Finished" and ep.turns[-1].observation.startswith("Finished!")
    assert sum(t.reward for t in ep.turns[:-1]) == 0.0  # never invalid, never repeated


def test_expert_wins_with_candidates(expert: ExpertQuestioner) -> None:
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    for i, task in enumerate(env.tasks("test")[:6]):
        ep = expert.play(env, task, random.Random(i))
        _check_episode(ep, task, env)
        assert ep.num_turns <= 7  # 8 candidates: about log2(8) = 3 questions, tails longer


def test_expert_wins_open_game(expert: ExpertQuestioner) -> None:
    env = TwentyQuestionsEnv(TwentyQuestionsOptions())
    tasks = {t.task_id: t for t in env.tasks("test")}
    for word in ["lip", "canyon", "sand", "submarine"]:
        ep = expert.play(env, tasks[word], random.Random(0), group_id="g")
        _check_episode(ep, tasks[word], env, group_id="g")
        assert ep.turns[-1].action_text in {f"Is it a {word}?", f"Is it an {word}?"}


def test_expert_is_deterministic_and_writes_demonstrations(expert: ExpertQuestioner, tmp_path) -> None:
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    task = env.tasks("test")[3]
    a = expert.play(env, task, random.Random(5))
    b = expert.play(env, task, random.Random(5))
    assert a.to_dict() == b.to_dict()
    path = tmp_path / "demos.jsonl"
    write_episodes(path, [a, b])
    back = read_episodes(path)
    assert [e.to_dict() for e in back] == [a.to_dict(), b.to_dict()]
    assert back[0].chat()[-1] == {"role": "assistant", "content": a.turns[-1].action_text}


def test_questions_use_words_in_their_everyday_sense() -> None:
    from turncredit.envs.twenty_questions.expert import _dominant_keys

    cable = S("line", "cable.n.02", "artifact")  # an electrical cable, a kind of "conductor"
    assert "conductor" in WordNetOracle().yes_keys(cable)  # the oracle says Yes to it...
    assert "conductor" not in _dominant_keys("cable.n.02")  # ...but its first sense is a person
    assert "device" in _dominant_keys("cable.n.02")
    with pytest.raises(ValueError, match="everyday_bias"):
        ExpertQuestioner(everyday_bias=0.5)


def test_noisy_expert_guesses_early_hears_no_and_never_repeats() -> None:
    """With early_guess_rate the expert sometimes guesses among several candidates; a wrong
    guess is answered "No.", that word is dropped, and the game still ends in a win."""
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    noisy = ExpertQuestioner(early_guess_rate=0.5)
    wrong_guesses = 0
    for i, task in enumerate(env.tasks("test")[:12]):
        ep = noisy.play(env, task, random.Random(i))
        assert ep.success and ep.num_turns <= env.max_turns
        labels = [t.label for t in ep.turns]
        assert "Repeated" not in labels and "Invalid" not in labels
        asked = [t.action_text for t in ep.turns]
        assert len(set(asked)) == len(asked)
        listed = ep.messages[-1]["content"].split("these 8 words: ", 1)[1].split(".", 1)[0]
        candidates = set(listed.split(", "))
        for t in ep.turns[:-1]:
            if t.action_text.startswith("Is it a") and not t.action_text.startswith("Is it a kind of"):
                assert t.observation.startswith("No")  # a guess that did not end the game was wrong
                assert t.action_text.rstrip("?").split(" ", 3)[-1] in candidates  # one of the listed words
                wrong_guesses += 1
    assert wrong_guesses >= 6  # about half the turns with several candidates left are guesses


def test_noise_free_expert_draws_nothing_from_the_rng(expert: ExpertQuestioner) -> None:
    """early_guess_rate 0 leaves the demonstrations exactly as before (same RNG stream)."""
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    task = env.tasks("test")[2]
    assert (ExpertQuestioner(early_guess_rate=0.0).play(env, task, random.Random(9)).to_dict()
            == expert.play(env, task, random.Random(9)).to_dict())
    with pytest.raises(ValueError, match="early_guess_rate"):
        ExpertQuestioner(early_guess_rate=1.5)


def test_the_list_walking_expert_guesses_listed_words_still_possible_and_wins_within_the_list() -> None:
    """early_guess_rate 1: no category question; each turn guesses a listed word no answer has
    ruled out, never the same twice, so an 8-word game is won within 8 turns."""
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    walker = ExpertQuestioner(early_guess_rate=1.0)
    lengths = []
    for i, task in enumerate(env.tasks("test")[:12]):
        ep = walker.play(env, task, random.Random(i))
        listed = ep.messages[-1]["content"].split("these 8 words: ", 1)[1].split(".", 1)[0].split(", ")
        guessed = [t.action_text for t in ep.turns]
        assert ep.success and 1 <= ep.num_turns <= 8
        assert len(set(guessed)) == len(guessed) and set(guessed) <= {guess(w) for w in listed}
        lengths.append(ep.num_turns)
    assert len(set(lengths)) > 1  # the order is random: the secret is not always found at the same turn


def test_sft_env_options_play_the_demonstrations_on_their_own_words(tmp_path) -> None:
    """sft.env_options reach the demonstrations only: their secrets and listed candidates all
    come from the SFT word list, while the RL environment keeps env.options' list."""
    from turncredit.config import ConfigError, env_from_config, load_config
    from turncredit.workflows import make_demos

    sft_words = ["dog", "cat", "mouse", "piano", "apple", "chair"]
    p = tmp_path / "sft-words.txt"
    p.write_text("\n".join(sft_words) + "\n")
    cfg = load_config("configs/20q-main.yaml", ["env.options.num_candidates=4",
                                                f"sft.env_options={{words_train: {p}}}"])
    demos = make_demos(cfg, 6)
    assert {d.task.data["secret"] for d in demos} <= set(sft_words)
    for d in demos:
        first_user = next(m["content"] for m in d.messages if m["role"] == "user")
        listed = first_user.split("these 4 words: ", 1)[1].split(".", 1)[0].split(", ")
        assert set(listed) <= set(sft_words) and d.task.data["secret"] in listed
    rl_words = {t.task_id for t in env_from_config(cfg).tasks("train")}
    assert len(rl_words) == 1000  # the shipped training list, not the SFT one
    with pytest.raises(ConfigError, match=r"sft\.env_options\.word_list: unknown key"):
        load_config("configs/20q-main.yaml", ["sft.env_options={word_list: x.tsv}"])
