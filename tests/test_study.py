"""turncredit study: arms × seeds at one budget → table, results and learning-curve PNGs."""

import json
from pathlib import Path

import pytest

from turncredit.cli import main
from turncredit.config import ConfigError
from turncredit.policy.loading import save_checkpoint
from turncredit.study import load_spec

ROOT = Path(__file__).resolve().parents[1]


def write_spec(tmp_path, model, arms=None, budget=None):
    spec = {
        "name": "probe", "seeds": [0, 1],
        "budget": budget or ["train.steps=2", "rollout.tasks_per_step=2", "rollout.group_size=2"],
        "common": [f"model.name={model}", "env.options.max_turns=2", "env.options.num_candidates=4",
                   "rollout.max_new_tokens=4", "eval.num_tasks=2", "eval.k=2", "eval.max_new_tokens=4", "run.threads=0"],
        "arms": arms or {"starpo": {"config": "configs/20q-starpo.yaml"},
                         "gigpo": {"config": "configs/20q-starpo.yaml", "overrides": ["algo.estimator=gigpo"]}},
    }
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


@pytest.fixture
def tiny(tmp_path, tiny_policy, smol_tokenizer, monkeypatch):
    monkeypatch.chdir(ROOT)
    return save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")


def test_a_study_trains_every_arm_and_seed_then_tabulates_and_plots(tmp_path, tiny, capsys):
    spec = write_spec(tmp_path, tiny)
    out = tmp_path / "out"
    assert main(["study", str(spec), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["runs"]) == {"starpo", "gigpo"} and all(set(r) == {"0", "1"} for r in res["runs"].values())
    for arm in ("starpo", "gigpo"):
        for seed in (0, 1):
            run = out / arm / f"seed_{seed}"
            assert len((run / "metrics.jsonl").read_text().splitlines()) == 2  # the budget held
            cfg = (run / "config.yaml").read_text()
            assert f"seed: {seed}" in cfg and ("estimator: gigpo" in cfg) == (arm == "gigpo")
        s = res["summary"][arm]
        assert len(s["values"]) == 2 and s["mean"] == pytest.approx(sum(s["values"]) / 2)
    table = (out / "table.md").read_text()
    assert "| starpo |" in table and "| gigpo |" in table and "mean_at_k mean ± std" in table
    for metric in ("success_rate", "reward_mean"):
        png = out / f"curves_{metric}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # run again: every finished run is reused, nothing retrains
    capsys.readouterr()
    assert main(["study", str(spec), "--out", str(out)]) == 0
    assert capsys.readouterr().out.count("done before") == 4


def test_study_spec_errors_name_the_problem(tmp_path, tiny, capsys):
    bad = write_spec(tmp_path, tiny, arms={"x": {"config": "configs/20q-starpo.yaml", "overrides": ["train.steps=9"]}})
    with pytest.raises(ConfigError, match="arms.x overrides the budget"):
        load_spec(bad)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(json.dumps({"arms": {"a": {"config": "configs/20q-starpo.yaml"},
                                          "b": {"config": "configs/qa-grpo.yaml"}}}))
    assert main(["study", str(mixed), "--out", str(tmp_path / "o")]) == 2
    assert "all arms must use one environment" in capsys.readouterr().err
    assert main(["study", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "study spec not found" in capsys.readouterr().err
