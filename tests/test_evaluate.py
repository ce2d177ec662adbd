from turncredit.envs.twenty_questions import TwentyQuestionsEnv
from turncredit.episode import Episode, Task, Turn
from turncredit.evaluate import compare, format_comparison, format_table, summarize

ENV = TwentyQuestionsEnv()  # its label rates: repeated_rate, invalid_rate


def ep(task, labels, success):
    turns = [Turn([], [], [], "q?", label=lab) for lab in labels]
    return Episode(task=Task(task), group_id=task, messages=[], turns=turns, success=success)


def test_summary_on_a_hand_table():
    eps = [ep("a", ["No", "Finished"], True), ep("a", ["Invalid", "Repeated", "No"], False),
           ep("b", ["Repeated", "No"], False), ep("b", ["Invalid", "Invalid"], False)]
    s = summarize(eps, k=2, env=ENV)
    assert s["mean_at_k"] == 0.25  # 1 win in 4 games
    assert s["pass_at_k"] == 0.5  # task a: 1 − C(1,2)/C(2,2) = 1; task b: 0
    assert s["avg_questions"] == 9 / 4
    assert s["avg_questions_when_won"] == 2
    assert s["repeated_rate"] == 2 / 9 and s["invalid_rate"] == 3 / 9
    table = format_table({"m": s}, 2)
    assert "Mean@2" in table and "25.0" in table and "50.0%" in table
    # per word: a wins 1 of 2, b 0 of 2; resampling the two words gives means 0, ¼, ½
    assert s["per_task_success"] == {"a": 0.5, "b": 0.0}
    assert s["mean_at_k_interval"] == [0.0, 0.5]
    assert "[0.0, 50.0]" in table


def test_compare_pairs_the_same_words_and_prints_the_difference():
    import pytest

    sft = summarize([ep("a", ["No"], False), ep("a", ["Finished"], True),
                     ep("b", ["Repeated"], False), ep("b", ["Repeated"], False)], k=2, env=ENV)
    rl = summarize([ep("a", ["Finished"], True), ep("a", ["Finished"], True),
                    ep("b", ["No"], False), ep("b", ["Finished"], True)], k=2, env=ENV)
    c = compare(sft, rl)
    assert c["difference"] == 0.5  # a: ½ → 1, b: 0 → ½
    assert c["interval"] == [0.5, 0.5]  # both words gained exactly ½
    assert c["repeated_rate"] == [0.5, 0.0]
    line = format_comparison("RL − SFT", c, 2)
    assert "+50.0 points" in line and "[+50.0, +50.0] over 2 words" in line and "repeated 50.0% → 0.0%" in line
    with pytest.raises(ValueError, match="different tasks"):
        compare(sft, summarize([ep("c", ["No"], False)] * 2, k=2, env=ENV))
    with pytest.raises(ValueError, match="different k"):
        compare(sft, summarize([ep("a", ["No"], False)], k=1, env=ENV))


def test_each_environment_reports_the_rates_of_its_own_labels():
    from turncredit.envs.multi_answer_qa import MultiAnswerQAEnv

    qa = summarize([ep("a", ["Search", "Invalid", "Answer"], True)], k=1, env=MultiAnswerQAEnv())
    assert "repeated_rate" not in qa and qa["invalid_rate"] == 1 / 3  # the QA env has no Repeated label
    assert "—" in format_table({"qa": qa}, 1).splitlines()[-1]
    line = format_comparison("x", compare(qa, qa), 1)
    assert "repeated" not in line and line.endswith("; invalid 33.3% → 33.3%")
