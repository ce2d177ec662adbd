"""Prompts from files: placeholder checks at load time, the 20 Questions game's system /
first / follow-up prompts, the judge's prompts and reasoning-then-label replies, and the token
layout a file-supplied prompt set gets under a Qwen3-style chat template."""

from __future__ import annotations

import random

import pytest

from turncredit.chat import ChatBridge
from turncredit.envs.base import Task
from turncredit.envs.templates import check_template, placeholders, resolve_template
from turncredit.envs.twenty_questions import LLMJudgeOracle, SecretWord, TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.envs.twenty_questions.llm_judge import parse_label
from turncredit.episode import Episode

DOG = Task("dog", {"secret": "dog", "synset": "dog.n.01", "category": "animal", "split": "train"})
# our own wording, laid out as the ΔBelief-RL reference lays out its prompts: a system prompt, a
# direct prompt as the first user message, and "<answer>. " + the direct prompt after every answer
SYSTEM = "You are the questioner in 20 Questions.\nFind the secret noun in {max_turns} questions."
DIRECT = "Ask one yes/no question, or guess.\n\nYour question:"
FOLLOWUP = "{label}. " + DIRECT


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text + "\n", encoding="utf-8")  # an editor's trailing newline is dropped
    return str(p)


def test_placeholders_and_checks():
    assert placeholders("{a} x {b!r} {{literal}}") == {"a", "b"}
    assert check_template("{reply} ok", "f", allowed=("reply", "label"), one_of=("reply", "label")) == "{reply} ok"
    with pytest.raises(ValueError, match=r"f: unknown placeholder \{answer\}; expected some of \{label\}, \{reply\}"):
        check_template("{answer}", "f", allowed=("reply", "label"))
    with pytest.raises(ValueError, match=r"missing placeholder \{question\}"):
        check_template("{secret}", "f", allowed=("secret", "question"), required=("question",))
    with pytest.raises(ValueError, match=r"needs at least one of \{label\}, \{reply\}"):
        check_template("no fields", "f", allowed=("reply", "label"), one_of=("reply", "label"))
    with pytest.raises(ValueError, match="literal brace"):
        check_template("a { b", "f", allowed=())
    with pytest.raises(ValueError, match="positional"):
        check_template("{0} and {}", "f", allowed=("reply",))


def test_file_errors_name_the_option_and_the_file(tmp_path):
    bad = _write(tmp_path, "followup.txt", "{answer}. Ask again.")
    with pytest.raises(ValueError, match=r"twenty_questions.followup_prompt_file \(.*followup.txt\): unknown "
                                         r"placeholder \{answer\}"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(followup_prompt_file=bad))
    with pytest.raises(FileNotFoundError, match=r"system_prompt_file: prompt file not found: .*nope.txt"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(system_prompt_file=str(tmp_path / "nope.txt")))
    # a game that lists candidates must show them: a first prompt without {listing}/{candidates} is refused
    first = _write(tmp_path, "first.txt", "Ask your first question.")
    with pytest.raises(ValueError, match=r"needs at least one of \{candidates\}, \{listing\}"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(first_prompt_file=first, num_candidates=8))
    assert TwentyQuestionsEnv(TwentyQuestionsOptions(first_prompt_file=first)).first_text == "Ask your first question."
    assert resolve_template("inline {x}", "", "f", allowed=("x",)) == "inline {x}"


def _reference_layout_env(tmp_path, **opts) -> TwentyQuestionsEnv:
    return TwentyQuestionsEnv(TwentyQuestionsOptions(
        max_turns=3, system_prompt_file=_write(tmp_path, "system.txt", SYSTEM),
        first_prompt_file=_write(tmp_path, "first.txt", DIRECT),
        followup_prompt_file=_write(tmp_path, "followup.txt", FOLLOWUP), **opts))


def _play(env: TwentyQuestionsEnv, questions: list[str]) -> Episode:
    messages, state = env.reset(DOG, random.Random(0))
    turns = []
    for q in questions:
        res = env.step(state, q)
        turns.append(res.to_turn(q))
    return Episode(task=DOG, group_id="g", messages=messages, turns=turns, outcome=0.0, success=False)


def test_file_prompts_shape_the_game(tmp_path):
    env = _reference_layout_env(tmp_path)
    ep = _play(env, ["Is it an animal?", "Is it a kind of tool?", "Is it a cat?"])
    assert ep.messages == [{"role": "system", "content": SYSTEM.format(max_turns=3)},
                           {"role": "user", "content": DIRECT}]
    # the follow-up after every answer but the last; the game's own reply words become {label}
    assert [t.observation for t in ep.turns] == [
        "yes. " + DIRECT, "no. " + DIRECT, "No. Game over. The answer was dog."]
    assert ep.turns[-1].answer == "No."  # what ΔBelief scores the last belief on: no follow-up, no reveal
    # the oracle's history keeps the bare answers (an LLM judge reads them)
    _, state = env.reset(DOG, random.Random(0))
    env.step(state, "Is it an animal?")
    assert state.history == [("Is it an animal?", "Yes.")]


def test_listed_game_fills_listing_and_candidates(tmp_path):
    first = _write(tmp_path, "first.txt", "Candidates ({num_candidates}): {candidates}.{listing}")
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(first_prompt_file=first, num_candidates=3))
    messages, state = env.reset(DOG, random.Random(0))
    names = ", ".join(w.word for w in state.candidates)
    assert messages[1]["content"] == f"Candidates (3): {names}. It is one of these 3 words: {names}."


def test_qwen3_style_token_layout_of_a_file_supplied_prompt_set(tmp_path, qwen3_style_tokenizer):
    """The sequence a rollout trains on, for the reference's layout under a Qwen3-style template
    (no thinking): every message in its own <|im_start|>role … <|im_end|> block, an empty think
    block opening each answer, loss on the questions and their end-of-turn tokens only."""
    env = _reference_layout_env(tmp_path)
    questions = ["Is it an animal?", "Is it a kind of tool?", "Is it a cat?"]
    ep = _play(env, questions)
    bridge = ChatBridge(qwen3_style_tokenizer, {"enable_thinking": False})
    ids, mask = bridge.dialogue_ids(ep.chat())
    tok = qwen3_style_tokenizer
    sys_text = SYSTEM.format(max_turns=3)
    expected = (
        f"<|im_start|>system\n{sys_text}<|im_end|>\n"
        f"<|im_start|>user\n{DIRECT}<|im_end|>\n"
        f"<|im_start|>assistant\n<think>\n\n</think>\n\n{questions[0]}<|im_end|>\n"
        f"<|im_start|>user\nyes. {DIRECT}<|im_end|>\n"
        f"<|im_start|>assistant\n<think>\n\n</think>\n\n{questions[1]}<|im_end|>\n"
        f"<|im_start|>user\nno. {DIRECT}<|im_end|>\n"
        f"<|im_start|>assistant\n<think>\n\n</think>\n\n{questions[2]}<|im_end|>"
    )
    assert tok.decode(ids) == expected
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == "".join(q + "<|im_end|>" for q in questions)
    # the opening is exactly the template's own rendering of the two file-supplied messages
    opening = tok.apply_chat_template(ep.messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert tok.decode(ids).startswith(opening)


class _Judge:
    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def complete(self, messages):
        self.seen.append(messages)
        return self.replies.pop(0)


@pytest.mark.parametrize("reply, label", [
    ("<think>It barks, so not Yes... </think><answer>[No]</answer>", "No"),
    ("Reasoning: a dog is an animal, answer Yes. <answer>Yes</answer>", "Yes"),
    ("<answer>No</answer> wait <answer>Yes</answer>", "Yes"),  # the last tag wins
    ("<think>hm</think> Yes", None),  # no tag
    ("<answer>maybe</answer>", None),
])
def test_answer_tag_format(reply, label):
    assert parse_label(reply, "answer_tag") == label


def test_first_word_format_skips_a_leading_think_block():
    assert parse_label("<think>\nIt is an animal.\n</think>\n\nYes.") == "Yes"
    with pytest.raises(ValueError, match="label_format"):
        parse_label("Yes", "xml")


def test_judge_prompts_from_files_in_the_reference_layout(tmp_path):
    system = _write(tmp_path, "judge_system.txt", "You answer questions about a secret word.")
    question = _write(tmp_path, "judge_question.txt",
                      "Secret: '{secret}'. Asked before: '{history}'. Question: '{question}'.\n"
                      "Think briefly, then reply as <answer>[Yes/No/Invalid/Repeated/Finished]</answer>.")
    judge = _Judge(["<think>dogs are animals</think><answer>Yes</answer>", "<answer>No</answer>"])
    oracle = LLMJudgeOracle(chat_client=judge, system_prompt_file=system, question_prompt_file=question,
                            label_format="answer_tag")
    dog = SecretWord("dog", "dog.n.01", "animal")
    assert oracle.answer("Is it an animal?", dog).label == "Yes"
    assert oracle.answer("Is it a tool?", dog, [("Is it an animal?", "Yes."), ("Is it red?", "No.")]).label == "No"
    # one user message: the earlier questions inline, joined by "; ", no chat turns for them
    assert judge.seen[1] == [
        {"role": "system", "content": "You answer questions about a secret word."},
        {"role": "user", "content": "Secret: 'dog'. Asked before: 'Is it an animal?; Is it red?'. "
                                    "Question: 'Is it a tool?'.\nThink briefly, then reply as "
                                    "<answer>[Yes/No/Invalid/Repeated/Finished]</answer>."}]
    with pytest.raises(ValueError, match=r"missing placeholder \{question\}"):
        LLMJudgeOracle(chat_client=judge, question_prompt="Secret {secret}")


def test_a_judges_repeated_is_not_cached():
    """"Repeated" depends on the game's history: cached, it would answer a fresh game's first question."""
    judge = _Judge(["Repeated", "Yes"])
    oracle = LLMJudgeOracle(chat_client=judge, cache=True)
    dog = SecretWord("dog", "dog.n.01", "animal")
    assert oracle.answer("Is it an animal?", dog, [("Is it an animal?", "Yes.")]).label == "Repeated"
    assert oracle.answer("Is it an animal?", dog).label == "Yes"
