"""The LLM judge oracle: label parsing, re-asking, caching, the env's overriding rules, and
both backends (a loopback chat-completions server and the local HF model)."""

from __future__ import annotations

import functools
import random

import pytest
from loopback import JSONHandler, serve

from turncredit.envs.base import EnvFailure, Task
from turncredit.envs.twenty_questions import LLMJudgeOracle, SecretWord, TwentyQuestionsEnv, TwentyQuestionsOptions
from turncredit.envs.twenty_questions.oracle import WordNetOracle
from turncredit.envs.twenty_questions.llm_judge import parse_label
from turncredit.llm import HFChatClient

DOG = Task("dog", {"secret": "dog", "synset": "dog.n.01", "category": "animal", "split": "train"})


class ScriptedJudge:
    """Answers from a list (then "No."), and records every conversation it was shown."""

    def __init__(self, replies=()):
        self.replies, self.seen = list(replies), []

    def complete(self, messages):
        self.seen.append(messages)
        return self.replies.pop(0) if self.replies else "No."


def _env(judge, **opts):
    env = TwentyQuestionsEnv(TwentyQuestionsOptions(**opts))
    env.oracle = LLMJudgeOracle(chat_client=judge)
    return env


@pytest.mark.parametrize("reply, label", [
    ("Yes.", "Yes"), ("no", "No"), ("  **Repeated** - you asked", "Repeated"), ("FINISHED!", "Finished"),
    ("Invalid", "Invalid"), ("I think yes", None), ("", None), ("Yesterday", None),
])
def test_parse_label(reply, label):
    assert parse_label(reply) == label


def test_judge_sees_the_secret_and_the_history_and_its_labels_reach_the_player():
    judge = ScriptedJudge(["Yes.", "Repeated"])
    env = _env(judge)
    _, st = env.reset(DOG, random.Random(0))
    r1 = env.step(st, "Is it an animal?")
    r2 = env.step(st, "Is it some kind of creature?")
    assert (r1.label, r1.reply) == ("Yes", "Yes.")
    assert r2.label == "Repeated" and r2.reward == env.options.repeated_reward
    system, *rest = judge.seen[1]
    assert '"dog"' in system["content"]
    assert rest == [{"role": "user", "content": "Is it an animal?"}, {"role": "assistant", "content": "Yes."},
                    {"role": "user", "content": "Is it some kind of creature?"}]


def test_syntax_and_exact_mention_override_the_judge():
    judge = ScriptedJudge(["No."])
    env = _env(judge)
    _, st = env.reset(DOG, random.Random(0))
    assert env.step(st, "animal").label == "Invalid"  # no question mark
    won = env.step(st, "Is it a dog?")
    assert won.success and won.label == "Finished"
    assert judge.seen == []  # neither reached the judge


def test_a_judge_finished_without_the_secret_named_is_a_yes():
    env = _env(ScriptedJudge(["Finished", "Finished"]))
    _, st = env.reset(DOG, random.Random(0))
    near = env.step(st, "Is it a puppy?")  # the judge calls it a win; the secret was not named
    assert near.label == "Yes" and not near.done and not near.success
    trusting = LLMJudgeOracle(chat_client=ScriptedJudge(["Finished"]), finished_needs_mention=False)
    assert trusting.answer("Is it a puppy?", SecretWord("dog", "dog.n.01", "animal")).label == "Finished"
    named = LLMJudgeOracle(chat_client=ScriptedJudge(["Finished"]))
    assert named.answer("Is it a dog?", SecretWord("dog", "dog.n.01", "animal")).label == "Finished"


def test_unparseable_replies_are_asked_again_then_the_episode_aborts():
    judge = ScriptedJudge(["Hmm, maybe?", "Yes."])
    oracle = LLMJudgeOracle(chat_client=judge, parse_retries=1)
    dog = SecretWord("dog", "dog.n.01", "animal")
    assert oracle.answer("Is it alive?", dog).label == "Yes" and oracle.unparseable == 1
    judge.replies = ["what?", "hmm"]
    with pytest.raises(EnvFailure, match="after 2 tries"):
        oracle.answer("Is it big?", dog)
    # through the env's batch step the failure aborts that episode only
    env = _env(ScriptedJudge(["???"] * 3 + ["No."]))
    s1, s2 = (env.reset(DOG, random.Random(0))[1] for _ in range(2))
    out = env.step_batch([s1, s2], ["Is it red?", "Is it blue?"])
    assert isinstance(out[0], EnvFailure) and out[1].label == "No"


def test_deterministic_answers_are_cached_per_secret_and_normalised_question():
    judge = ScriptedJudge(["Yes.", "No."])
    oracle = LLMJudgeOracle(chat_client=judge)
    dog, cat = SecretWord("dog", "dog.n.01", "animal"), SecretWord("cat", "cat.n.01", "animal")
    assert oracle.answer("Is it a pet?", dog).label == "Yes"
    assert oracle.answer("is it a PET ?", dog).label == "Yes" and oracle.calls == 1
    assert oracle.answer("Is it a pet?", cat).label == "No" and oracle.calls == 2
    sampled = LLMJudgeOracle(chat_client=ScriptedJudge(), client_options={"temperature": 0.7})
    assert not sampled.use_cache


class JudgeHandler(JSONHandler):
    def do_POST(self):
        body = self.read_json()
        secret = body["messages"][0]["content"].split('"')[1]
        question = body["messages"][-1]["content"].lower()
        content = "Yes." if secret == "dog" and "animal" in question else "No."
        self.send_json({"choices": [{"message": {"content": content}}]})


def test_an_env_configured_with_the_http_judge(tmp_path):
    with serve(JudgeHandler) as base:
        env = TwentyQuestionsEnv(TwentyQuestionsOptions(oracle="llm", concurrency=2, oracle_options={
            "client": "openai", "client_options": {"model": "judge", "base_url": base + "/v1"}}))
        states = [env.reset(DOG, random.Random(0))[1] for _ in range(2)]
        out = env.step_batch(states, ["Is it an animal?", "Is it a tool?"])
        assert [r.label for r in out] == ["Yes", "No"]
    with pytest.raises(ValueError, match="oracle_options"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(oracle="llm", oracle_options={"nope": 1}))


def test_the_local_hf_judge_path(tiny_policy, smol_tokenizer):
    client = HFChatClient(model_obj=tiny_policy, tokenizer=smol_tokenizer, max_tokens=3)
    text = client.complete([{"role": "user", "content": "Is it an animal?"}])
    assert isinstance(text, str) and len(smol_tokenizer(text)["input_ids"]) <= 3
    assert client.complete([{"role": "user", "content": "Is it an animal?"}]) == text  # greedy
    # the random tiny model never says a label: asked again, then the episode aborts
    oracle = LLMJudgeOracle(chat_client=client, parse_retries=1)
    with pytest.raises(EnvFailure):
        oracle.answer("Is it an animal?", SecretWord("dog", "dog.n.01", "animal"))
    assert oracle.calls == 2 and oracle.unparseable == 2


@functools.lru_cache(maxsize=1)
def _test_words():
    from turncredit.envs.twenty_questions.words import default_words_path, load_words

    return load_words(default_words_path("test"))


class WordNetJudgeHandler(JSONHandler):
    """A chat-completions judge that answers as the WordNet oracle would, in the recipe's
    reasoning-then-verdict format; records each request."""

    seen: list = []

    def do_POST(self):
        import re

        body = self.read_json()
        WordNetJudgeHandler.seen.append(body)
        prompt = body["messages"][-1]["content"]
        word = re.search(r"The secret word is '([^']*)'", prompt).group(1)
        question = re.search(r"New question: '(.*)'", prompt).group(1)
        secret = next(w for w in _test_words() if w.word == word)
        label = WordNetOracle().answer(question, secret).label
        reply = f"<think>Yes would be wrong unless it fits.</think> It is {label}. <answer>[{label}]</answer>"
        self.send_json({"choices": [{"message": {"content": reply}}]})


def test_the_starpo_4b_eval_recipe_path_with_a_local_model_and_a_served_judge(tiny_policy, smol_tokenizer):
    """configs/20q-starpo-4b-eval.yaml with the hub model swapped for the tiny one, the judge on loopback."""
    from turncredit.workflows import evaluate_expert, evaluate_model
    from turncredit.config import load_config
    from turncredit.policy.session import PolicySession

    WordNetJudgeHandler.seen = []
    with serve(WordNetJudgeHandler) as base:
        cfg = load_config("configs/20q-starpo-4b-eval.yaml", [
            f"env.options.oracle_options.client_options.base_url={base}/v1", "rollout.backend=kv",
            "rollout.backend_options={}", "eval.num_tasks=3", "eval.k=2", "eval.max_new_tokens=4"])
        assert (cfg.eval.k, cfg.env.options["max_turns"], cfg.env.options["num_candidates"]) == (2, 20, 0)
        res, eps = evaluate_model(cfg, "tiny", PolicySession.from_model(tiny_policy, smol_tokenizer))
        assert len(eps) == 6 and res["mean_at_k"] == 0.0  # the random model asks nothing valid
        # one question to the recipe's own judge: its protocol on the wire
        from turncredit.workflows import env_and_expert

        env, _ = env_and_expert(cfg)
        _, state = env.reset(env.tasks("test")[0], random.Random(0))
        env.step(state, "Is it a kind of animal?")
        env.step(state, "Is it a kind of tool?")
        recipe_calls = list(WordNetJudgeHandler.seen)
        # the scripted questioner, answered through the served judge; greedy here, so its answers are
        # cached: the expert asks the judge about every open-game word to keep its candidates
        cfg.env.options["oracle_options"]["client_options"]["temperature"] = 0.0
        expert = evaluate_expert(cfg)
    assert expert["mean_at_k"] == 1.0
    first, second = recipe_calls
    # the reference's judge: sampled (T 0.7, top-p 0.8, top-k 20), 250 tokens, the questioner's
    # earlier questions inside one user message after the system prompt
    assert first["model"] == "Qwen/Qwen3-14B" and first["temperature"] == 0.7 and first["max_tokens"] == 250
    assert (first["top_p"], first["top_k"]) == (0.8, 20)
    assert first["chat_template_kwargs"] == {"enable_thinking": False}
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    assert "Questions asked so far: ''\nNew question: 'Is it a kind of animal?'" in first["messages"][-1]["content"]
    assert ("Questions asked so far: 'Is it a kind of animal?'\nNew question: 'Is it a kind of tool?'"
            in second["messages"][-1]["content"])
