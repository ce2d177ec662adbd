"""Oracle agreement: Cohen's kappa by hand, the report on a small set, and the CLI."""

import json

import pytest

from turncredit.cli import main
from turncredit.envs.base import EnvFailure
from turncredit.envs.twenty_questions import SecretWord, WordNetOracle
from turncredit.envs.twenty_questions.oracle import OracleAnswer
from turncredit.oracle_check import agreement, cohen_kappa

DOG = SecretWord("dog", "dog.n.01", "animal")


def test_cohen_kappa_hand_computed():
    # p_o = 3/4; p_e = (2·1 + 2·3) / 16 = 1/2; κ = (3/4 − 1/2) / (1 − 1/2) = 1/2
    assert cohen_kappa(["Yes", "Yes", "No", "No"], ["Yes", "No", "No", "No"]) == pytest.approx(0.5)
    assert cohen_kappa(["No"] * 3, ["No"] * 3) == 1.0
    with pytest.raises(ValueError, match="equally long"):
        cohen_kappa(["Yes"], [])


class AlwaysYes:
    def answer(self, question, secret, history=()):
        if "fail" in question:
            raise EnvFailure("judge down")
        return OracleAnswer("Yes")


def test_agreement_against_wordnet_on_a_small_set():
    pairs = [(DOG, "Is it an animal?"), (DOG, "Is it a tool?"), (DOG, "Is it a mammal?"), (DOG, "fail?")]
    res = agreement(pairs, AlwaysYes(), WordNetOracle())
    # WordNet: Yes, No, Yes → the always-Yes judge agrees on 2 of the 3 it answered
    assert (res["judged"], res["judge_failures"]) == (3, 1)
    assert res["agreement"] == pytest.approx(2 / 3)
    assert res["confusion"] == {"Yes": {"Yes": 2, "No": 1}}
    assert res["kappa"] == pytest.approx(0.0)  # p_o = p_e = 2/3: no better than chance


def test_oracle_check_cli_with_a_question_file(tmp_path, capsys):
    qf = tmp_path / "q.jsonl"
    qf.write_text("".join(json.dumps({"secret": "dog", "synset": "dog.n.01", "question": q}) + "\n"
                          for q in ("Is it an animal?", "Is it a tool?", "Is it a dog?")))
    out = tmp_path / "agree.json"
    assert main(["oracle-check", "configs/20q-starpo.yaml", "--questions", str(qf), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["agreement"] == 1.0 and res["kappa"] == pytest.approx(1.0) and res["judged"] == 3
    assert "agreement 100.0 %" in capsys.readouterr().out
    qf.write_text('{"secret": "dog"}\n')
    assert main(["oracle-check", "configs/20q-starpo.yaml", "--questions", str(qf)]) == 2
