import json

import pytest

from turncredit.episode import Episode, Turn, read_episodes, write_episodes


def make_episode():
    return Episode(
        task={"task_id": "dog", "secret": "dog"}, group_id="s1-g0",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}],
        turns=[
            Turn([1, 2, 3], [10, 11, 99], [-0.5, -1.25, -0.125], "Is it an animal?", "Yes.", 0.0,
                 {"label": "Yes"}),
            Turn([98, 5], [12, 99], [-0.1, -3.3333333333333335], "Is it a dog?", "Finished!", 1.9,
                 {"label": "Finished"}, advantage=0.7071067811865476),
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
