"""Live progress (only when asked or on a terminal) and the optional TensorBoard / W&B sinks."""

import sys
import types

import pytest

from turncredit.config import ConfigError, load_config
from turncredit.policy.loading import tiny_model
from turncredit.policy.session import PolicySession
from turncredit.train.trainer import Trainer

SMALL = ["env.options.max_turns=2", "env.options.num_candidates=4", "rollout.tasks_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=2"]


def train(tmp_path, tokenizer, extra):
    cfg = load_config(None, SMALL + extra)
    trainer = Trainer(cfg, tmp_path / "run", session=PolicySession.from_model(tiny_model(tokenizer, seed=0), tokenizer))
    return trainer.train()


def test_progress_bars_show_rollout_and_update_only_when_asked(tmp_path, smol_tokenizer, capsys):
    train(tmp_path, smol_tokenizer, ["run.progress=always"])
    err = capsys.readouterr().err
    assert "step 1/2 rollout" in err and "step 2/2 update" in err and "4/4" in err
    assert "last step: success" in err  # step 2's bars carry step 1's key metrics
    train(tmp_path / "quiet", smol_tokenizer, ["run.progress=auto"])  # stderr is not a terminal here
    assert "rollout" not in capsys.readouterr().err


class FakeWriter:
    instances: list = []

    def __init__(self, log_dir):
        self.log_dir, self.scalars, self.closed = log_dir, [], False
        FakeWriter.instances.append(self)

    def add_scalar(self, key, value, step):
        self.scalars.append((key, value, step))

    def flush(self):
        pass

    def close(self):
        self.closed = True


def test_tensorboard_gets_every_numeric_metric_per_step(tmp_path, smol_tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=FakeWriter))
    FakeWriter.instances = []
    history = train(tmp_path, smol_tokenizer, ["run.loggers=[tensorboard]"])
    [w] = FakeWriter.instances
    assert w.log_dir == str(tmp_path / "run" / "tensorboard") and w.closed
    assert ("reward_mean", history[1]["reward_mean"], 2) in w.scalars
    assert {k for k, _, s in w.scalars if s == 1} == {k for k, v in history[0].items()
                                                      if isinstance(v, (int, float)) and k != "step"}


def test_wandb_run_is_named_configured_and_logged(tmp_path, smol_tokenizer, monkeypatch):
    calls = {}

    class Run:
        def log(self, metrics, step):
            calls.setdefault("log", []).append((step, metrics))

        def finish(self):
            calls["finished"] = True

    def init(**kw):
        calls["init"] = kw
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    train(tmp_path, smol_tokenizer, ["run.loggers=[wandb]", "run.name=probe",
                                     "run.logger_options={wandb: {project: p, mode: offline}}"])
    init_kw = calls["init"]
    assert init_kw["name"] == "probe" and init_kw["project"] == "p" and init_kw["mode"] == "offline"
    assert init_kw["config"]["train"]["steps"] == 2
    assert [s for s, _ in calls["log"]] == [1, 2] and "success_rate" in calls["log"][0][1] and calls["finished"]


def test_logger_config_errors_name_the_key(tmp_path, smol_tokenizer, monkeypatch):
    with pytest.raises(ConfigError, match="run.loggers: unknown logger 'mlflow'"):
        load_config(None, ["run.loggers=[mlflow]"])
    with pytest.raises(ConfigError, match="run.logger_options.wandb"):
        load_config(None, ["run.logger_options={wandb: {}}"])
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(ConfigError, match="pip install wandb"):
        train(tmp_path, smol_tokenizer, ["run.loggers=[wandb]"])
