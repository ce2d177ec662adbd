"""An expert questioner for SFT demonstrations and as a ceiling.

It keeps the candidate words still consistent with the answers, asks the WordNet category
question whose predicted Yes/No split of them is closest to even (maximal information gain),
and guesses once one candidate is left. Answers are predicted by the same oracle the env uses,
so every question is parsed and the candidate set never loses the secret.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from functools import lru_cache
from typing import Any, Iterable, Protocol, Sequence

from turncredit.envs.base import Task
from turncredit.envs.twenty_questions.oracle import WordNetOracle
from turncredit.envs.twenty_questions.record import TwentyQuestionsRecord
from turncredit.envs.twenty_questions.wordnet import load_wordnet
from turncredit.envs.twenty_questions.words import SecretWord
from turncredit.episode import Episode, Turn


class Game(Protocol):
    """What the expert needs of the 20 Questions env (named by protocol: the env builds its
    expert, so the expert does not import the env)."""

    max_turns: int

    def reset(self, task: Task, rng: random.Random) -> tuple[list[dict[str, str]], Any]: ...

    def step(self, state: Any, action_text: str) -> Any: ...

    def words(self, split: str) -> list[SecretWord]: ...

#: WordNet's top-level abstractions: valid keys, but no person would ask about them
STOP_KEYS = frozenset({
    "entity", "physical_entity", "abstraction", "abstract_entity", "relation", "part", "portion",
    "whole", "unit", "thing", "causal_agent", "cause", "causal_agency", "matter", "physical_object",
    "instrumentality", "instrumentation", "artefact", "object",
})
_KEY_RE = re.compile(r"[a-z]+(?:[_-][a-z]+)*")


def article(word: str) -> str:
    """'a' or 'an' by the sound of the first letter, with the common exceptions."""
    w = word.lower()
    if re.match(r"(?:hour|honest|honou?r|heir)", w):
        return "an"
    if re.match(r"(?:uni|use|usu|ute|eu|one|once|ewe|u[bcfhjkmnprstvz][aeiou])", w):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


def phrase(key: str) -> str:
    """The question that asks about a category key: 'Is it a kind of musical instrument?'.

    "a kind of" reads well for count and mass nouns alike ("furniture", "water"), which
    WordNet does not tell apart.
    """
    return f"Is it a kind of {key.replace('_', ' ')}?"


def guess(word: str) -> str:
    return f"Is it {article(word)} {word}?"


def entropy(yes: int, n: int) -> float:
    """Information gain (bits) of a question answered Yes by `yes` of `n` equally likely words."""
    if n <= 0 or yes <= 0 or yes >= n:
        return 0.0
    p = yes / n
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


class ExpertQuestioner:
    """Greedy information-gain questioner over WordNet category keys."""

    def __init__(
        self,
        oracle: WordNetOracle | None = None,
        stop_keys: Iterable[str] = STOP_KEYS,
        everyday_bias: float = 1.5,
        early_guess_rate: float = 0.0,
    ) -> None:
        """`everyday_bias` ≥ 1 trades natural questions for fewer ones (1.0: no preference).

        `early_guess_rate` makes a noisy expert: on each turn with several candidates left it
        guesses one of them at random with this probability, usually wrongly, and after the
        "No." goes on without that word. A perfect expert never hears "No." to a guess, so a
        model trained only on its games has never seen how to recover from one. At 1.0 it asks
        no category question: it guesses the listed words still possible one by one, in random
        order, a strategy a small model can copy from its context (the list) and that wins
        any game with as many turns left as candidates.
        """
        if everyday_bias < 1.0:
            raise ValueError(f"everyday_bias: expected >= 1.0, got {everyday_bias}")
        if not 0.0 <= early_guess_rate <= 1.0:
            raise ValueError(f"early_guess_rate: expected a probability in [0, 1], got {early_guess_rate}")
        self.oracle = oracle or WordNetOracle()
        self.stop_keys = frozenset(stop_keys)
        self.everyday_bias = everyday_bias
        self.early_guess_rate = early_guess_rate

    def familiarity(self, key: str) -> int:
        return _familiarity(key)

    def best_key(self, candidates: list[SecretWord], asked: set[str] = frozenset()) -> str | None:
        """The askable key splitting `candidates` most evenly; ties: familiar, short, a-z."""
        best = self._best(candidates, asked)
        return best[1] if best else None

    def _best(self, candidates: list[SecretWord], asked: set[str]) -> tuple[int, str] | None:
        """(Yes count, key) of the best askable key, or None.

        Keys in their everyday sense (see `_dominant_keys`) win unless some other key gains
        more than `everyday_bias` times as much information.
        """
        n = len(candidates)
        counts = Counter(k for c in candidates for k in self.oracle.yes_keys(c))
        dominant = set().union(*(_dominant_keys(c.synset) for c in candidates))
        usable = {
            k: m for k, m in counts.items()
            if 0 < m < n and k not in asked and k not in self.stop_keys and _KEY_RE.fullmatch(k)
        }
        everyday = self._top({k: m for k, m in usable.items() if k in dominant}, n)
        anysense = self._top(usable, n)
        if everyday is None or anysense is None:
            return anysense
        if entropy(anysense[0], n) > self.everyday_bias * entropy(everyday[0], n):
            return anysense
        return everyday

    def _top(self, counts: dict[str, int], n: int) -> tuple[int, str] | None:
        ranked = sorted(
            (abs(2 * m - n), -self.familiarity(k), k.count("_"), k, m) for k, m in counts.items()
        )
        for *_, k, m in ranked:
            if self.oracle.parse(phrase(k)) == k:  # the oracle reads the phrasing back as k
                return m, k
        return None

    def predict(self, question: str, secret: SecretWord) -> str:
        """The label the env gives `question` if `secret` is the answer (mention rule included)."""
        return self.oracle.label_for(question, secret)

    def next_question(
        self,
        candidates: list[SecretWord],
        asked: set[str] = frozenset(),
        turns_left: int | None = None,
        rng: random.Random | None = None,
    ) -> str:
        """The best category question, or a guess when it cannot beat one (or, with `rng` and
        an `early_guess_rate`, sometimes a guess among several candidates).

        A question answered Yes by a single candidate tells no more than guessing that
        candidate, which may also win; on the last turn only a guess can win.
        """
        pool = sorted(candidates, key=lambda c: c.word)
        if rng is not None and self.early_guess_rate > 0 and len(pool) > 1 and rng.random() < self.early_guess_rate:
            return guess(rng.choice(pool).word)
        if len(pool) > 1 and (turns_left is None or turns_left > 1):
            best = self._best(pool, asked)
            if best:
                m, key = best
                if m > 1:
                    return phrase(key)
                pool = [c for c in pool if key in self.oracle.yes_keys(c)] or pool
        return guess(pool[0].word)

    def update(self, candidates: list[SecretWord], question: str, label: str) -> list[SecretWord]:
        """The candidates consistent with `label` (unchanged on Invalid/Repeated)."""
        if label not in ("Yes", "No", "Finished"):
            return candidates
        kept = [c for c in candidates if self.predict(question, c) == label]
        return kept or candidates

    def play(
        self, env: Game, task: Task, rng: random.Random, group_id: str = "", prefix: Sequence[str] = ()
    ) -> Episode:
        """Play one full game; a text-only Episode (no token ids).

        `prefix`: questions someone else asked first (a policy's, for DAgger), replayed in
        order; the expert takes over from the state they reached, the candidates narrowed by
        their answers. The game may end within them (then the episode holds only those turns).
        """
        messages, state = env.reset(task, rng)
        candidates = list(state.candidates) or list(env.words(state.split))
        asked: set[str] = set()
        turns: list[Turn] = []
        result = None
        replay = list(prefix)
        while result is None or not result.done:
            if replay:
                question = replay.pop(0)
            else:
                question = self.next_question(candidates, asked, env.max_turns - state.turns, rng)
            result = env.step(state, question)
            turns.append(result.to_turn(question))
            key = TwentyQuestionsRecord.of(turns[-1]).category
            if key:
                asked.add(key)
            candidates = self.update(candidates, question, result.label)
        return Episode(
            task=task,
            group_id=group_id or task.task_id,
            messages=messages,
            turns=turns,
            outcome=1.0 if result.success else 0.0,
            success=result.success,
            truncated=not result.success and state.turns >= env.max_turns,
        )


@lru_cache(maxsize=None)
def _dominant_keys(synset_name: str) -> frozenset[str]:
    """Keys of the secret's hypernyms whose most common noun sense is that hypernym.

    Asking only these keeps questions in the words' everyday sense: "line" (first sense: a
    formation of people) is never asked to mean a cable, though the oracle would say Yes.
    """
    wn = load_wordnet()
    syn = wn.synset(synset_name)
    out = set()
    for s in syn.closure(lambda s: s.hypernyms() + s.instance_hypernyms()):
        for name in s.lemma_names():
            first = wn.synsets(name.lower(), "n")
            if first and first[0] == s:
                out.add(name.lower())
    return frozenset(out)


@lru_cache(maxsize=None)
def _familiarity(key: str) -> int:
    """Tagged-corpus frequency of the key's noun senses (WordNet's cntlist)."""
    wn = load_wordnet()
    return sum(lem.count() for lem in wn.lemmas(key, "n") if lem.name().lower() == key)
