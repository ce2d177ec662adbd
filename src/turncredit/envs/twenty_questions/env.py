"""20 Questions with the questioner as the agent (the ΔBelief-RL paper protocol).

Rule order per turn: syntax (ends in '?', exactly one '?', 2-500 characters, no control
character such as a line break: the reference's single-sentence check) → a whole-word
mention of the secret forces Finished → the oracle's label, with a question whose normalised
text or parsed category was already answered Yes/No turned into Repeated. Rewards are the
paper's: invalid −5, repeated −1, and on the last turn +2 for a win and −0.05 × turns (only
if more than one turn was played).
"""

from __future__ import annotations

import math
import random
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from turncredit.envs.base import ENVS, MultiTurnEnv, StepResult, Task
from turncredit.envs.templates import resolve_template
from turncredit.envs.twenty_questions.oracle import ORACLES, Oracle, OracleAnswer, normalise_question
from turncredit.envs.twenty_questions.record import TwentyQuestionsRecord
from turncredit.faults import CallFailed, FaultInjector, FaultOptions, call_with_retries
from turncredit.envs.twenty_questions.mentions import mentions, plural_forms  # noqa: F401 (re-exported)
from turncredit.envs.twenty_questions.words import (
    SPLITS,
    SecretWord,
    default_words_path,
    load_words,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are playing 20 Questions. I am thinking of a secret word: a concrete noun, such as an "
    "animal, a plant, a food, a man-made object, a body part or a substance. Find it by asking "
    "yes/no questions, one question per turn. I answer \"Yes.\" or \"No.\", or tell you that a "
    "question was invalid or repeated. Ask about its category (for example, whether it is a "
    "kind of vehicle), narrowing down step by step. When you think you know the word, guess it "
    "with \"Is it a <word>?\". Reply with exactly one short question ending in \"?\" and "
    "nothing else."
)

#: the opening user message; {listing} is " It is one of these N words: a, b, …." (empty in the open game)
DEFAULT_FIRST_PROMPT = "I am thinking of a secret word.{listing} You have {max_turns} questions. Ask your first question."
#: the user message after each answer but the last: the answer alone ({label} is its word in
#: lower case, as the ΔBelief-RL reference writes it before repeating its direct prompt)
DEFAULT_FOLLOWUP_PROMPT = "{reply}"
FIRST_PROMPT_FIELDS = ("listing", "candidates", "num_candidates", "max_turns")
FOLLOWUP_PROMPT_FIELDS = ("reply", "label", "turn", "max_turns", "turns_left")

SYNTAX_HINT = "Ask exactly one yes/no question: {min}-{max} characters, ending in a single '?'."
REPEATED_REPLY = "Repeated question. You already asked that; ask something new."
ORACLE_LABELS = ("Yes", "No", "Invalid", "Repeated", "Finished")


@dataclass
class TwentyQuestionsOptions:
    max_turns: int = 20
    words_train: str = ""  # path to a word list; empty = the shipped split
    words_val: str = ""
    words_test: str = ""
    num_candidates: int = 0  # 0 = open game; N > 0 = list N candidate words in the prompt
    oracle: str = "wordnet"
    oracle_options: dict[str, Any] = field(default_factory=dict)  # keyword options of the oracle
    concurrency: int = 1  # oracle calls of one turn in flight at once (>1 for an LLM judge server)
    oracle_retries: int = 2  # a failed, timed-out or unusable oracle answer is asked again this often
    oracle_backoff: float = 0.5  # seconds before the first retry, doubling after each
    faults: dict[str, Any] = field(default_factory=dict)  # a FaultOptions: inject oracle faults (tests, benchmarks)
    win_reward: float = 2.0
    invalid_reward: float = -5.0
    repeated_reward: float = -1.0
    length_penalty: float = 0.05
    min_chars: int = 2
    max_chars: int = 500
    end_on_invalid: bool = False
    #: with listed candidates and an exact oracle (WordNet), keep the words still consistent with
    #: the answers and report each turn's exact belief gain (`StepResult.belief_gain`): one
    #: oracle answer per consistent word per question (~8 ms a game)
    exact_belief: bool = True
    # prompts (each `…_file` option, when set, replaces the text with the file's, checked at load)
    system_prompt: str = DEFAULT_SYSTEM_PROMPT  # placeholders: {max_turns}
    system_prompt_file: str = ""
    first_prompt: str = DEFAULT_FIRST_PROMPT  # placeholders: {listing} {candidates} {num_candidates} {max_turns}
    first_prompt_file: str = ""
    followup_prompt: str = DEFAULT_FOLLOWUP_PROMPT  # placeholders: {reply} {label} {turn} {max_turns} {turns_left}
    followup_prompt_file: str = ""


@dataclass
class TwentyQuestionsState:
    secret: SecretWord
    split: str
    candidates: list[SecretWord] = field(default_factory=list)  # empty in the open game
    consistent: list[SecretWord] = field(default_factory=list)  # listed words the answers allow
    asked: set[str] = field(default_factory=set)  # normalised questions answered Yes/No
    asked_keys: set[str] = field(default_factory=set)  # their parsed categories
    history: list[tuple[str, str]] = field(default_factory=list)  # (question, oracle reply) so far
    turns: int = 0
    done: bool = False
    success: bool = False


def word_task(w: SecretWord, split: str) -> Task:
    return Task(task_id=w.word, data={"secret": w.word, "synset": w.synset, "category": w.category, "split": split})


@ENVS.register("twenty_questions")
class TwentyQuestionsEnv(MultiTurnEnv):
    """The questioner guesses a secret concrete noun in up to `max_turns` yes/no questions."""

    Options = TwentyQuestionsOptions
    LABEL_RATES = {"repeated_rate": "Repeated", "invalid_rate": "Invalid"}

    def __init__(self, options: TwentyQuestionsOptions | None = None) -> None:
        super().__init__(options if options is not None else TwentyQuestionsOptions())
        o = self.options
        if o.max_turns < 1:
            raise ValueError(f"twenty_questions.max_turns: expected >= 1, got {o.max_turns}")
        if o.num_candidates < 0:
            raise ValueError(
                f"twenty_questions.num_candidates: expected >= 0, got {o.num_candidates}"
            )
        if not 1 <= o.min_chars <= o.max_chars:
            raise ValueError(
                "twenty_questions.min_chars/max_chars: expected 1 <= min <= max, "
                f"got {o.min_chars}, {o.max_chars}"
            )
        try:
            self.oracle: Oracle = ORACLES.get(o.oracle)(**o.oracle_options)
        except TypeError as e:
            raise ValueError(f"twenty_questions.oracle_options: {e}") from None
        try:
            faults = FaultOptions(**o.faults)
        except TypeError as e:
            raise ValueError(f"twenty_questions.faults: {e}") from None
        self.injector = FaultInjector(faults) if faults.rate > 0 else None
        self.system_text = resolve_template(o.system_prompt, o.system_prompt_file, "twenty_questions.system_prompt",
                                            allowed=("max_turns",))
        self.first_text = resolve_template(
            o.first_prompt, o.first_prompt_file, "twenty_questions.first_prompt", allowed=FIRST_PROMPT_FIELDS,
            one_of=("listing", "candidates") if o.num_candidates > 0 else ())  # a listed game must show its list
        self.followup_text = resolve_template(o.followup_prompt, o.followup_prompt_file, "twenty_questions.followup_prompt",
                                              allowed=FOLLOWUP_PROMPT_FIELDS, one_of=("reply", "label"))
        self.oracle_counts: Counter[str] = Counter()
        self._words: dict[str, list[SecretWord]] = {}

    def summarize(self, episodes: Sequence[Any]) -> dict[str, float]:
        """`belief_gained`: nats of exact belief a game gathers (Σ_t `Turn.belief_gain`; log N is
        everything there is to learn about N listed words), over the games that have it."""
        gained = [sum(t.belief_gain for t in ep.turns) for ep in episodes
                  if ep.turns and all(t.belief_gain is not None for t in ep.turns)]
        return {"belief_gained": math.fsum(gained) / len(gained)} if gained else {}

    def counters(self) -> dict[str, int]:
        out = {"oracle_retries": self.oracle_counts["retries"], "oracle_gave_up": self.oracle_counts["gave_up"]}
        if self.injector is not None:
            out.update({f"faults_{k}": self.injector.counts[k] for k in self.injector.options.kinds})
        return out

    def expert(self, **options: Any):
        """The information-gain questioner; `options` go to `ExpertQuestioner` (early_guess_rate,
        everyday_bias)."""
        from turncredit.envs.twenty_questions.expert import ExpertQuestioner

        return ExpertQuestioner(**options).play

    # -- word lists ----------------------------------------------------------------------------
    def words_path(self, split: str) -> Path:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        custom = getattr(self.options, f"words_{split}")
        return Path(custom).expanduser() if custom else default_words_path(split)

    def words(self, split: str) -> list[SecretWord]:
        """The secrets of a split (loaded once)."""
        if split not in self._words:
            self._words[split] = load_words(self.words_path(split), needs_synset=self.oracle.needs_synset)
        return self._words[split]

    def tasks(self, split: str) -> list[Task]:
        return [word_task(w, split) for w in self.words(split)]

    def find_task(self, task_id: str) -> Task:
        """A listed word's task, or any WordNet noun (so a person may pick the secret)."""
        try:
            return super().find_task(task_id)
        except ValueError:
            pass
        from turncredit.envs.twenty_questions.wordnet import load_wordnet
        from turncredit.envs.twenty_questions.words import qualifying_synset, secret_from_synset

        word = task_id.strip().lower()
        syn = qualifying_synset(load_wordnet(), word, any_sense=True)
        if syn is None:
            raise ValueError(f"secret {task_id!r}: not in the word lists and no WordNet noun sense")
        return word_task(secret_from_synset(word, syn), "test")  # candidates drawn from the test words

    # -- episode -------------------------------------------------------------------------------
    def reset(
        self, task: Task, rng: random.Random
    ) -> tuple[list[dict[str, str]], TwentyQuestionsState]:
        d = task.data
        try:
            secret = SecretWord(d["secret"], d["synset"], d.get("category", ""))
        except KeyError as e:
            raise ValueError(
                f"twenty_questions task {task.task_id!r}: missing field {e.args[0]!r}"
            ) from None
        split = d.get("split") or self._find_split(secret.word)
        state = TwentyQuestionsState(secret=secret, split=split)
        listing = words = ""
        if self.options.num_candidates > 0:
            # sorted first, so the draw depends only on the rng, never on the file's order
            others = {w.word: w for w in self.words(split) if w.word != secret.word}
            pool = sorted(others.values(), key=lambda w: w.word)
            picked = rng.sample(pool, min(self.options.num_candidates - 1, len(pool))) + [secret]
            rng.shuffle(picked)
            state.candidates = picked
            state.consistent = list(picked)
            words = ", ".join(w.word for w in picked)
            listing = f" It is one of these {len(picked)} words: {words}."
        max_turns = self.options.max_turns
        user = self.first_text.format(listing=listing, candidates=words, num_candidates=len(state.candidates),
                                      max_turns=max_turns)
        messages = [
            {"role": "system", "content": self.system_text.format(max_turns=max_turns)},
            {"role": "user", "content": user},
        ]
        return messages, state

    def _find_split(self, word: str) -> str:
        for split in SPLITS:
            if any(w.word == word for w in self.words(split)):
                return split
        return "train"

    def step(self, state: TwentyQuestionsState, action_text: str) -> StepResult:
        if state.done:
            raise RuntimeError("twenty_questions: step() called on a finished episode")
        o = self.options
        state.turns += 1
        label, key, reply = self._judge(state, action_text if isinstance(action_text, str) else "")
        state.history.append(((action_text or "").strip(), reply))
        reward = {"Invalid": o.invalid_reward, "Repeated": o.repeated_reward}.get(label, 0.0)
        won = label == "Finished"
        done = won or state.turns >= o.max_turns or (o.end_on_invalid and label == "Invalid")
        gain = self._belief_gain(state, action_text if isinstance(action_text, str) else "", label)
        answer, outcome_reward = None, None
        if done:
            outcome = o.win_reward if won else 0.0
            if not won:
                answer = reply
                reply += f" Game over. The answer was {state.secret.word}."
            if state.turns > 1:
                outcome -= o.length_penalty * state.turns
            reward += outcome
            outcome_reward = outcome  # the end-of-game part (turn_grpo can spread it over turns)
        else:  # the next question's prompt: the answer, and whatever the protocol repeats after it
            reply = self.followup_text.format(reply=reply, label=label.lower(), turn=state.turns,
                                              max_turns=o.max_turns, turns_left=o.max_turns - state.turns)
        state.done, state.success = done, won
        return StepResult(reply=reply, reward=reward, done=done, success=won, answer=answer, belief_gain=gain,
                          label=label, outcome_reward=outcome_reward, record=TwentyQuestionsRecord(category=key))

    def _belief_gain(self, state: TwentyQuestionsState, question: str, label: str) -> float | None:
        """log(|C_before| / |C_after|) over the listed words C consistent with every answer so far.

        With a uniform prior over the listed words and a deterministic oracle, the exact
        posterior of the secret is 1/|C|, so this is the exact Δ log b of the ΔBelief method.
        A word stays in C when the oracle would have given it the same label (a mention of it
        would have been "Finished"); Invalid and Repeated answers tell nothing. None in the
        open game, with `exact_belief` off, or with an oracle that is not `exact` (a judge, a person).
        """
        if not (self.options.exact_belief and state.consistent and self.oracle.exact):
            return None  # a person or an LLM judge is not asked about every listed word
        before = len(state.consistent)
        if label == "Finished":
            state.consistent = [state.secret]
        elif label in ("Yes", "No"):
            earlier = state.history[:-1]
            state.consistent = [
                c for c in state.consistent
                if c.word == state.secret.word or self.oracle.label_for(question, c, earlier) == label
            ]
        return math.log(before / len(state.consistent))

    def _judge(self, state: TwentyQuestionsState, action_text: str) -> tuple[str, str | None, str]:
        """(label, parsed category, reply text) for one question."""
        o = self.options
        q = action_text.strip()
        if (not (o.min_chars <= len(q) <= o.max_chars) or not q.endswith("?") or q.count("?") != 1
                or any(unicodedata.category(c) == "Cc" for c in q)):  # 2 of 15,928 study questions
            hint = SYNTAX_HINT.format(min=o.min_chars, max=o.max_chars)
            return "Invalid", None, f"Invalid question. {hint}"
        secret = state.secret
        if mentions(q, secret.word):
            return "Finished", self.oracle.parse(q), f"Finished! The answer was {secret.word}."
        ans = self._ask_oracle(q, state)
        if ans.label == "Finished":
            return "Finished", ans.key, f"Finished! The answer was {secret.word}."
        if ans.label == "Invalid":
            return "Invalid", None, f"Invalid question. {ans.hint}".strip()
        norm = normalise_question(q)
        if ans.label == "Repeated" or norm in state.asked or (ans.key is not None and ans.key in state.asked_keys):
            return "Repeated", ans.key, REPEATED_REPLY
        state.asked.add(norm)
        if ans.key is not None:
            state.asked_keys.add(ans.key)
        return ans.label, ans.key, f"{ans.label}."

    def _ask_oracle(self, question: str, state: TwentyQuestionsState) -> OracleAnswer:
        """The oracle's answer, retried with backoff when it fails, stalls or is not a label."""
        def attempt() -> OracleAnswer:
            fault = self.injector.before_call() if self.injector else None
            ans = OracleAnswer("(garbage)") if fault == "garbage" else self.oracle.answer(question, state.secret, state.history)
            if ans.label not in ORACLE_LABELS:
                raise CallFailed(f"oracle {self.options.oracle!r} answered {ans.label!r}, not one of {', '.join(ORACLE_LABELS)}")
            return ans

        o = self.options
        return call_with_retries(attempt, f"oracle {o.oracle!r}", o.oracle_retries, o.oracle_backoff, self.oracle_counts)
