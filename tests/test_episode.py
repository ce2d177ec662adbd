import json

import pytest

from turncredit.envs.multi_answer_qa import QARecord
from turncredit.envs.twenty_questions.record import TwentyQuestionsRecord
from turncredit.episode import Episode, Task, Turn, read_episodes, write_episodes


def make_episode():
    return Episode(
        task=Task("dog", {"secret": "dog"}), group_id="s1-g0",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}],
        turns=[
            Turn([1, 2, 3], [10, 11, 99], [-0.5, -1.25, -0.125], "Is it an animal?", "Yes.", 0.0,
                 label="Yes"),
            Turn([98, 5], [12, 99], [-0.1, -3.3333333333333335], "Is it a dog?", "Finished!", 1.9,
                 advantage=0.7071067811865476, label="Finished"),
        ],
        outcome=1.0, success=True, info={"note": "ünïcode"},
    )


def test_token_sequence_and_mask():
    ep = make_episode()
    assert ep.token_ids() == [1, 2, 3, 10, 11, 99, 98, 5, 12, 99]
    assert ep.action_mask() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert ep.total_reward == pytest.approx(1.9)
    assert ep.chat()[-2:] == [
        {"role": "user", "content": "Yes."}, {"role": "assistant", "content": "Is it a dog?"}]


def test_jsonl_round_trip_is_lossless(tmp_path):
    eps = [make_episode(), make_episode()]
    eps[1].aborted = True
    write_episodes(tmp_path / "e.jsonl", eps)
    back = read_episodes(tmp_path / "e.jsonl")
    assert back == eps
    assert back[0].turns[1].sampler_logprobs[1] == -3.3333333333333335


def test_bad_episode_file_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    good = json.dumps(make_episode().to_dict())
    p.write_text(good + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_episodes(p)
    d = make_episode().to_dict()
    d["turns"][0]["colour"] = "red"
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1.turns\[0\]: unknown field"):
        read_episodes(p)
    with pytest.raises(FileNotFoundError, match="episode file not found"):
        read_episodes(tmp_path / "missing.jsonl")


def test_typed_fields_round_trip_through_jsonl(tmp_path):
    """What stages exchange survives a file: labels, the env's own and end-of-game rewards, its
    typed per-turn record (a JSON dict, int keys included), the abort reason, the beliefs."""
    qa = QARecord(queries=2, retrieved_gold=["Germany"], answers=["Germany"], f1=0.5, recall_at={5: 0.5, 10: 1.0})
    ep = make_episode()
    ep.turns[0].record = TwentyQuestionsRecord(category="animal").to_dict()
    ep.turns[0].truncated_action = True
    ep.turns[1].record = qa.to_dict()
    ep.turns[1].env_reward, ep.turns[1].outcome_reward = 1.5, 1.9
    ep.aborted, ep.abort_reason, ep.log_beliefs = True, "oracle down", [-3.0, -1.5, -0.25]
    write_episodes(tmp_path / "e.jsonl", [ep])
    line = json.loads((tmp_path / "e.jsonl").read_text())
    assert line["task"] == {"task_id": "dog", "secret": "dog"}  # flat, as files have always held it
    [back] = read_episodes(tmp_path / "e.jsonl")
    assert back.task == Task("dog", {"secret": "dog"})
    assert [t.label for t in back.turns] == ["Yes", "Finished"] and back.turns[0].truncated_action
    assert (back.turns[1].env_reward, back.turns[1].outcome_reward) == (1.5, 1.9)
    assert TwentyQuestionsRecord.of(back.turns[0]).category == "animal"
    assert QARecord.of(back.turns[1]) == qa
    assert (back.abort_reason, back.log_beliefs) == ("oracle down", [-3.0, -1.5, -0.25])
    with pytest.raises(ValueError, match=r"QARecord: unknown field\(s\) \['category'\]"):
        QARecord.of(back.turns[0])  # another environment's record is an error, not silent defaults


def test_an_older_file_with_info_keys_still_loads(tmp_path):
    """Before the typed fields, stages talked through `info` keys: those move to their fields;
    the rest (the env's own keys, a shaper's bonus) stays in info for reading."""
    old = {
        "task": {"task_id": "dog", "secret": "dog"}, "group_id": "g", "messages": [],
        "turns": [
            {"prompt_ids": [1], "action_ids": [2], "sampler_logprobs": [-0.5], "action_text": "Is it an animal?",
             "observation": "Yes.", "reward": 0.1, "info": {"label": "Yes", "category": "animal",
                                                           "env_reward": 0.0, "belief_reward": 0.1},
             "advantage": 0.3, "answer": None, "belief_gain": None, "advantage_penalty": 0.0},
            {"prompt_ids": [3], "action_ids": [4], "sampler_logprobs": [-0.25], "action_text": "Is it a dog?",
             "observation": "Finished!", "reward": 1.9, "info": {"label": "Finished", "outcome_reward": 1.9,
                                                                "truncated_action": True}},
        ],
        "outcome": 0.0, "success": False, "aborted": True, "truncated": False,
        "info": {"abort_reason": "oracle down", "log_beliefs": [-2.0, -1.0]},
    }
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    [ep] = read_episodes(tmp_path / "old.jsonl")
    assert ep.task == Task("dog", {"secret": "dog"})
    first, last = ep.turns
    assert (first.label, first.env_reward, first.info) == ("Yes", 0.0, {"category": "animal", "belief_reward": 0.1})
    assert (last.label, last.outcome_reward, last.truncated_action, last.info) == ("Finished", 1.9, True, {})
    assert first.record == {} and first.advantage == 0.3
    assert (ep.abort_reason, ep.log_beliefs, ep.info) == ("oracle down", [-2.0, -1.0], {})
