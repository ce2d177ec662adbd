"""What a 20 Questions questioner does with its turns: category questions, guesses of a listed
candidate, guesses of a word that is not in the list, repeats, invalid turns.

    python benchmarks/turn_kinds.py runs/20q-starpo/eval/after_SFT.jsonl [more.jsonl ...] \
        [--lists train=data/words/train.tsv test=data/words/test.tsv ...]

For games with candidates listed in the prompt (env.options.num_candidates > 0). `--lists` also
says where the guessed words that were not listed come from: the first named word list holding
each (e.g. the training split, which the SFT demonstrations listed), or none.
"""

import argparse
import re
from collections import Counter
from pathlib import Path

from turncredit.episode import read_episodes

GUESS = re.compile(r"Is it (?:a|an|the) (.+)\?$")


def listed_words(ep) -> set[str]:
    opening = ep.messages[-1]["content"]
    words = re.search(r"one of these \d+ words: (.+?)\. You have", opening)
    if words is None:
        raise ValueError(f"{ep.group_id}: no candidate list in the opening message")
    return set(words.group(1).split(", "))


def turn_kind(ep, i: int, listed: set[str]) -> str:
    """The kind of turn `i` of `ep`; where the environment recorded exact belief gains, a
    category question or a listed guess is split by whether its answer ruled out any listed word
    still possible."""
    t = ep.turns[i]
    guess = GUESS.match(t.action_text.strip())
    if t.label in ("Invalid", "Repeated"):
        return t.label.lower()
    if "kind of" in t.action_text:
        return "category question" + _gain(t)
    if guess and guess.group(1) in listed:
        won = ep.success and i == len(ep.turns) - 1
        return "guess, listed word" + (", the winning one" if won else _gain(t))
    return "guess, word not listed"


def turn_kinds(episodes) -> Counter:
    """Turns by kind (`turn_kind`)."""
    kinds: Counter = Counter()
    for ep in episodes:
        listed = listed_words(ep)
        kinds.update(turn_kind(ep, i, listed) for i in range(len(ep.turns)))
    return kinds


def _gain(turn) -> str:
    if turn.belief_gain is None:
        return ""
    return ", rules out some" if turn.belief_gain > 0 else ", rules out none"


def unlisted_origins(episodes, lists: dict[str, set[str]]) -> Counter:
    """Answered guesses ("Is it a <word>?", not a category) of words not in the game's list, by
    the first of `lists` that holds the word ("in no list" otherwise)."""
    origins: Counter = Counter()
    for ep in episodes:
        listed = listed_words(ep)
        for t in ep.turns:
            guess = GUESS.match(t.action_text.strip())
            if guess is None or "kind of" in t.action_text or t.label in ("Invalid", "Repeated"):
                continue
            word = guess.group(1).lower()
            if word not in listed:
                origins[next((name for name, words in lists.items() if word in words), "in no list")] += 1
    return origins


def read_list(spec: str) -> tuple[str, set[str]]:
    name, sep, path = spec.partition("=")
    if not sep:
        raise SystemExit(f"--lists: expected NAME=FILE, got {spec!r}")
    lines = Path(path).read_text().splitlines()
    return name, {line.split("\t")[0].strip().lower() for line in lines[1:] if line.strip()}  # after the header


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("episodes", nargs="+", help="JSONL Episodes (turncredit eval --episodes, or a run's eval/)")
    ap.add_argument("--lists", nargs="*", default=[], metavar="NAME=FILE", help="word lists (TSV with a header)")
    args = ap.parse_args()
    lists = dict(read_list(x) for x in args.lists)
    for path in args.episodes:
        eps = read_episodes(path)
        kinds = turn_kinds(eps)
        total = sum(kinds.values())
        won = sum(ep.success for ep in eps)
        print(f"{path}: {len(eps)} games, {won} won, {total} turns")
        for k, n in kinds.most_common():
            print(f"  {k:<40} {n:>6}  {100 * n / total:5.1f} %")
        if lists:
            origins = unlisted_origins(eps, lists)
            n_all = sum(origins.values())
            print(f"  unlisted guesses by word list ({n_all}):")
            for k, n in origins.most_common():
                print(f"    {k:<38} {n:>6}  {100 * n / n_all:5.1f} %")
