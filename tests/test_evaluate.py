from turncredit.episode import Episode, Turn
from turncredit.evaluate import format_table, summarize


def ep(task, labels, success):
    turns = [Turn([], [], [], "q?", info={"label": lab}) for lab in labels]
    return Episode(task={"task_id": task}, group_id=task, messages=[], turns=turns, success=success)


def test_summary_on_a_hand_table():
    eps = [ep("a", ["No", "Finished"], True), ep("a", ["Invalid", "Repeated", "No"], False),
           ep("b", ["Repeated", "No"], False), ep("b", ["Invalid", "Invalid"], False)]
    s = summarize(eps, k=2)
    assert s["mean_at_k"] == 0.25  # 1 win in 4 games
    assert s["pass_at_k"] == 0.5  # task a: 1 − C(1,2)/C(2,2) = 1; task b: 0
    assert s["avg_questions"] == 9 / 4
    assert s["avg_questions_when_won"] == 2
    assert s["repeated_rate"] == 2 / 9 and s["invalid_rate"] == 3 / 9
    table = format_table({"m": s}, 2)
    assert "Mean@2" in table and "25.0" in table and "50.0%" in table
