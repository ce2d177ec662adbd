"""The paper's LLM judge as a 20 Questions oracle, over any chat backend.

By default the judge gets a system prompt naming the secret, the questions already asked with its
earlier answers as chat turns, and the new question; it must answer one word: Yes, No, Invalid,
Repeated or Finished. Both prompts are templates a config may load from files (`system_prompt_file`,
`question_prompt_file`): a question prompt with `{question}` in it is the ΔBelief-RL reference's
layout — one user message holding the secret, the question and (with `{history}`) the earlier
questions joined by "; " — and `label_format: answer_tag` reads the reference's reasoning-then-label
reply, the label inside the last `<answer>…</answer>`.
The environment's syntactic checks and its exact-mention rule run before the judge and override
it. A reply that does not start with one of those words is asked again (`parse_retries`
times); after that the episode is aborted (`EnvFailure`) and counted, never guessed. With a
deterministic judge (temperature 0) answers are cached per (secret, normalised question).
As in the ΔBelief-RL reference (`false_positive_behavior: yes`), a judge's Finished for a
question that does not name the secret exactly is taken as Yes (`finished_needs_mention`): the
judge may find "Is it a pet dog?" close enough to "puppy", the game does not.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Sequence

from turncredit.errors import EnvFailure
from turncredit.envs.templates import placeholders, resolve_template
from turncredit.envs.twenty_questions.mentions import mentions
from turncredit.envs.twenty_questions.oracle import ORACLES, Oracle, OracleAnswer, normalise_question
from turncredit.envs.twenty_questions.words import SecretWord

JUDGE_LABELS = ("Yes", "No", "Invalid", "Repeated", "Finished")

JUDGE_PROMPT = (
    "You are the oracle in a game of 20 Questions. The secret word is \"{secret}\". The player "
    "asks yes/no questions to find it. Answer each question with exactly one word:\n"
    "Yes - the answer is yes for \"{secret}\";\n"
    "No - the answer is no;\n"
    "Invalid - it is not a yes/no question about the secret;\n"
    "Repeated - it asks again what an earlier question already asked;\n"
    "Finished - the player named the secret word.\n"
    "Reply with the one word only."
)

SYSTEM_PROMPT_FIELDS = ("secret",)
QUESTION_PROMPT_FIELDS = ("secret", "question", "history")

_FIRST_WORD = re.compile(r"^\W*([A-Za-z]+)")
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def parse_label(reply: str, label_format: str = "first_word") -> str | None:
    """The judge's label (case-insensitive), or None.

    `first_word`: the word the reply starts with, after a leading `<think>…</think>` block (a
    thinking judge's reasoning). `answer_tag`: the first word inside the *last* `<answer>…</answer>`
    ("<think>…</think><answer>[No]</answer>" → "No"), so reasoning that mentions a label first does
    not count; a reply without the tag is unparseable.
    """
    reply = reply or ""
    if label_format == "answer_tag":
        tags = _ANSWER_TAG.findall(reply)
        if not tags:
            return None
        reply = tags[-1]
    elif label_format == "first_word":
        reply = _THINK.sub("", reply, count=1)
    else:
        raise ValueError(f"llm judge: label_format must be 'first_word' or 'answer_tag', got {label_format!r}")
    m = _FIRST_WORD.match(reply)
    word = m.group(1).capitalize() if m else ""
    return word if word in JUDGE_LABELS else None


@ORACLES.register("llm")
class LLMJudgeOracle(Oracle):
    """`client`: a name in `turncredit.llm.CHAT_CLIENTS` ("openai", "hf"); `client_options` go to it."""

    def __init__(self, client: str = "openai", client_options: dict[str, Any] | None = None,
                 parse_retries: int = 2, cache: bool | None = None, chat_client: Any = None,
                 finished_needs_mention: bool = True, system_prompt: str = JUDGE_PROMPT, system_prompt_file: str = "",
                 question_prompt: str = "{question}", question_prompt_file: str = "",
                 label_format: str = "first_word") -> None:
        """`system_prompt` (placeholder {secret}; empty: no system message) and `question_prompt`
        ({question}, {secret}, {history}) are the judge's messages, each replaced by its `…_file`."""
        from turncredit.llm import CHAT_CLIENTS

        self.system_text = resolve_template(system_prompt, system_prompt_file, "llm judge system_prompt",
                                            allowed=SYSTEM_PROMPT_FIELDS)
        self.question_text = resolve_template(question_prompt, question_prompt_file, "llm judge question_prompt",
                                              allowed=QUESTION_PROMPT_FIELDS, required=("question",))
        parse_label("", label_format)  # rejects an unknown format now, not at the first answer
        self.label_format = label_format
        #: the reference's layout: earlier questions inside the one user message, not as chat turns
        self.history_inline = "history" in placeholders(self.question_text)

        opts = dict(client_options or {})
        self.client = chat_client if chat_client is not None else CHAT_CLIENTS.get(client)(**opts)
        self.parse_retries = parse_retries
        self.finished_needs_mention = finished_needs_mention
        deterministic = float(opts.get("temperature", 0.0)) == 0.0
        self.use_cache = deterministic if cache is None else cache
        self._cache: dict[tuple[str, str], OracleAnswer] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.unparseable = 0

    def messages(self, question: str, secret: SecretWord, history: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        system = self.system_text.format(secret=secret.word)
        msgs = [{"role": "system", "content": system}] if system else []
        if not self.history_inline:
            for q, a in history:
                msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        user = self.question_text.format(question=question, secret=secret.word,
                                         history="; ".join(q for q, _ in history))
        return msgs + [{"role": "user", "content": user}]

    def answer(self, question: str, secret: SecretWord, history: Sequence[tuple[str, str]] = ()) -> OracleAnswer:
        key = (secret.word, normalise_question(question))
        if self.use_cache:
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit
        msgs = self.messages(question, secret, history)
        for _ in range(self.parse_retries + 1):
            reply = self.client.complete(msgs)  # raises EnvFailure when the server gives up
            with self._lock:
                self.calls += 1
            label = parse_label(reply, self.label_format)
            if label == "Finished" and self.finished_needs_mention and not mentions(question, secret.word):
                label = "Yes"  # a false positive: the secret was not named
            if label is not None:
                ans = OracleAnswer(label)
                if self.use_cache and label != "Repeated":  # a repeat depends on the game's history
                    with self._lock:
                        self._cache[key] = ans
                return ans
            with self._lock:
                self.unparseable += 1
        raise EnvFailure(f"LLM judge: no Yes/No/Invalid/Repeated/Finished in its reply after "
                         f"{self.parse_retries + 1} tries (last: {reply[:80]!r})")
