"""benchmarks/turn_kinds.py: what a questioner's turns are, and where its unlisted guesses come from."""

import importlib.util
from pathlib import Path

import pytest

from turncredit.episode import Episode, Task, Turn

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("turn_kinds", ROOT / "benchmarks" / "turn_kinds.py")
turn_kinds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(turn_kinds)


def game(questions, won=False):
    opening = "I am thinking of a secret word. It is one of these 3 words: cat, lamp, rice. You have 20 questions."
    turns = [Turn([], [], [], q, belief_gain=gain, label=label) for q, label, gain in questions]
    return Episode(task=Task("cat"), group_id="g", messages=[{"role": "user", "content": opening}],
                   success=won, turns=turns)


def test_turns_are_counted_by_kind_and_unlisted_guesses_by_the_list_holding_the_word():
    ep = game([("Is it a kind of animal?", "Yes", 1.1), ("Is it a kind of food?", "No", 0.0),
               ("Is it a dog?", "No", 0.0), ("Is it a dog?", "Repeated", 0.0), ("Is it a zorbl?", "No", 0.0),
               ("Is it a lamp?", "No", 0.0), ("Is it a cat?", "Finished", 0.0)], won=True)
    kinds = turn_kinds.turn_kinds([ep])
    assert kinds == {"category question, rules out some": 1, "category question, rules out none": 1,
                     "guess, word not listed": 2, "repeated": 1, "guess, listed word, rules out none": 1,
                     "guess, listed word, the winning one": 1}
    # the repeat of "dog" is not counted twice; the first list holding a word names it
    origins = turn_kinds.unlisted_origins([ep], {"train": {"dog", "horse"}, "wide": {"dog", "zebra"}})
    assert origins == {"train": 1, "in no list": 1}


def test_advantage_by_kind_takes_the_repeat_penalty_out_of_the_reward():
    """Hand-computed: two games of one group. At turn 0 one repeats a listed word (reward −1, the
    game's repeat penalty) and one guesses an unlisted word (0): turn-wise GRPO gives them ∓1/√2
    (mean −0.5, unbiased std √0.5); with the repeat not charged in the reward both are 0; the
    idle cost of 1 on the advantage comes off both. The repeat counts among the guesses of listed
    words; a guided member's borrowed turn is left out."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from advantage_by_kind import LISTED_TOTAL, UNLISTED_TOTAL, advantages_by_kind
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    a = game([("Is it a lamp?", "Repeated", 0.0)])
    b = game([("Is it a zorbl?", "No", 0.0)])
    r = 0.5 / (0.5 ** 0.5 + 1e-6)  # turn_grpo adds ε = 1e-6 to the std
    a.turns[0].reward, a.turns[0].env_reward, a.turns[0].advantage = -1.0, -1.0, -r - 1.0
    b.turns[0].reward, b.turns[0].env_reward, b.turns[0].advantage = 0.0, 0.0, r - 1.0
    for t in (a.turns[0], b.turns[0]):
        t.advantage_penalty = 1.0
    table = advantages_by_kind([a, b])
    assert set(table) == {"repeated, a listed word", "guess, word not listed", LISTED_TOTAL, UNLISTED_TOTAL}
    assert table["repeated, a listed word"]["as trained"] == table[LISTED_TOTAL]["as trained"] == [pytest.approx(-r)]
    assert table["guess, word not listed"]["as trained"] == table[UNLISTED_TOTAL]["as trained"] == [pytest.approx(r)]
    assert table["repeated, a listed word"]["trained on"] == [pytest.approx(-r - 1.0)]
    assert table["repeated, a listed word"]["repeats not in reward"] == [0.0]
    assert table["guess, word not listed"]["repeats not in reward"] == [0.0]
    b.turns[0].advantage = 0.5  # not what turn_grpo gave: the check names the game and turn
    with pytest.raises(SystemExit, match="g turn 0"):
        advantages_by_kind([a, b])
    b.expert_from = 1  # b's only turn is now borrowed: not counted (and not checked)
    assert set(advantages_by_kind([a, b])) == {"repeated, a listed word", LISTED_TOTAL}
