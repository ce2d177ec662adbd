"""What a 20 Questions questioner does with its turns: category questions, guesses of a listed
candidate, guesses of a word that is not in the list, repeats, invalid turns.

    python benchmarks/turn_kinds.py runs/20q-starpo/eval/after_SFT.jsonl [more.jsonl ...]

For games with candidates listed in the prompt (env.options.num_candidates > 0).
"""

import re
import sys
from collections import Counter

from turncredit.episode import read_episodes

GUESS = re.compile(r"Is it (?:a|an|the) (.+)\?$")


def listed_words(ep) -> set[str]:
    opening = ep.messages[-1]["content"]
    words = re.search(r"one of these \d+ words: (.+?)\. You have", opening)
    if words is None:
        raise ValueError(f"{ep.group_id}: no candidate list in the opening message")
    return set(words.group(1).split(", "))


def turn_kinds(episodes) -> Counter:
    """Turns by kind; where the environment recorded exact belief gains, a category question or
    a listed guess is split by whether its answer ruled out any listed word still possible."""
    kinds: Counter = Counter()
    for ep in episodes:
        listed = listed_words(ep)
        for i, t in enumerate(ep.turns):
            label = t.info.get("label")
            guess = GUESS.match(t.action_text.strip())
            if label in ("Invalid", "Repeated"):
                kinds[label.lower()] += 1
            elif "kind of" in t.action_text:
                kinds["category question" + _gain(t)] += 1
            elif guess and guess.group(1) in listed:
                won = ep.success and i == len(ep.turns) - 1
                kinds["guess, listed word" + (", the winning one" if won else _gain(t))] += 1
            else:
                kinds["guess, word not listed"] += 1
    return kinds


def _gain(turn) -> str:
    if turn.belief_gain is None:
        return ""
    return ", rules out some" if turn.belief_gain > 0 else ", rules out none"


if __name__ == "__main__":
    for path in sys.argv[1:]:
        eps = read_episodes(path)
        kinds = turn_kinds(eps)
        total = sum(kinds.values())
        won = sum(ep.success for ep in eps)
        print(f"{path}: {len(eps)} games, {won} won, {total} turns")
        for k, n in kinds.most_common():
            print(f"  {k:<40} {n:>6}  {100 * n / total:5.1f} %")
