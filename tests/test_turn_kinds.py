"""benchmarks/turn_kinds.py: what a questioner's turns are, and where its unlisted guesses come from."""

import importlib.util
from pathlib import Path

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
