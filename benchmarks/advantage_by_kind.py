"""What turn-wise GRPO paid each kind of 20 Questions turn in a training run, and what it would
have paid with repeats not charged inside the reward.

    python benchmarks/advantage_by_kind.py runs/RUN/episodes/step_*.jsonl

Reads a run's training episodes (estimator `turn_grpo`, default options). Per turn kind
(`turn_kinds.turn_kind`): the mean group-relative advantage as trained — recomputed from the
stored rewards and checked against the stored advantage plus the idle cost charged on it
(`Turn.advantage_penalty`) — and the same with each repeated turn's environment penalty
(`repeated_reward`) taken out of its reward, i.e. a repeat rewarded like any other idle turn.
The idle cost on the advantage comes on top of both columns (mean shown; "trained on" is the
first column less it). A repeat is split by what it repeats (a listed word or anything else);
in a guided member (`algo.expert_guidance`) the borrowed turns are left out (not trained on) and
the expert's are their own kinds. Two totals over the policy's own guesses say whether the
credit prefers the list: all guesses of listed words (their repeats included) against all
guesses of unlisted words (diagnosis U).
"""

import argparse
import math
import statistics
from collections import defaultdict

from turn_kinds import GUESS, listed_words, turn_kind

from turncredit.credit.turn_grpo import turn_grpo
from turncredit.episode import read_episodes


def repeat_penalty(turn) -> float:
    """The environment's charge for a repeat: its reward less any end-of-game part."""
    return turn.env_reward - (turn.outcome_reward or 0.0) if turn.label == "Repeated" else 0.0


LISTED_TOTAL = "all guesses of listed words (repeats included)"
UNLISTED_TOTAL = "all guesses of unlisted words"


def kind(ep, i: int, listed: set[str]) -> str:
    """`turn_kind`, with a repeat split by what it repeats and an expert's turn marked."""
    k = turn_kind(ep, i, listed)
    if k == "repeated":
        text = ep.turns[i].action_text.strip()
        guess = GUESS.match(text)
        k += ", a listed word" if guess and "kind of" not in text and guess.group(1) in listed else ", another"
    return ("expert: " if ep.expert_from is not None else "") + k


def total(k: str) -> str | None:
    """The policy's guess total a kind counts in, if any."""
    if k.startswith("expert: "):
        return None
    if k.startswith("guess, listed word") or k == "repeated, a listed word":
        return LISTED_TOTAL
    return UNLISTED_TOTAL if k == "guess, word not listed" else None


def advantages_by_kind(episodes) -> dict[str, dict[str, list[float]]]:
    eps = [ep for ep in episodes if not ep.aborted and ep.turns]
    groups = [ep.group_id for ep in eps]
    as_trained = turn_grpo(groups, [[t.reward for t in ep.turns] for ep in eps])
    no_repeat = turn_grpo(groups, [[t.reward - repeat_penalty(t) for t in ep.turns] for ep in eps])
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ep, a0, a1 in zip(eps, as_trained, no_repeat):
        listed = listed_words(ep)
        for i, t in enumerate(ep.turns):
            if i < (ep.expert_from or 0):
                continue  # a guided member's borrowed turn: context, not trained on
            stored = t.advantage + t.advantage_penalty
            if not math.isclose(stored, a0[i], abs_tol=1e-6):
                raise SystemExit(f"{ep.group_id} turn {i}: stored advantage {stored:.6f} is not turn_grpo's "
                                 f"{a0[i]:.6f}: not a turn_grpo run with default options")
            k = kind(ep, i, listed)
            for name in filter(None, (k, total(k))):
                row = out[name]
                row["as trained"].append(a0[i])
                row["repeats not in reward"].append(a1[i])
                row["cost on advantage"].append(t.advantage_penalty)
                row["trained on"].append(a0[i] - t.advantage_penalty)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("episodes", nargs="+", help="a turn_grpo run's training episodes (RUN/episodes/step_*.jsonl)")
    args = ap.parse_args()
    table = advantages_by_kind([ep for p in args.episodes for ep in read_episodes(p)])
    cols = ("as trained", "repeats not in reward", "cost on advantage", "trained on")
    print(f"| turn kind | turns | {' | '.join(cols)} |")
    print("|---|---|" + "---|" * len(cols))
    for kind, row in sorted(table.items(), key=lambda kv: -len(kv[1]["as trained"])):
        cells = " | ".join(f"{statistics.fmean(row[c]):+.3f}" for c in cols)
        print(f"| {kind} | {len(row['as trained'])} | {cells} |")
