"""Optional metric sinks beside metrics.jsonl: TensorBoard and Weights & Biases.

Off by default (`run.loggers: []`) and imported only when asked for, so neither package is a
dependency; asking for one that is not installed is a config error saying what to install.
Only numbers are logged (one scalar per metric key per step).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

from turncredit.registry import Registry


class MetricLogger(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


LOGGERS: Registry[Any] = Registry("logger")


def _import(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"run.loggers: this logger needs the {package!r} package (pip install {package})") from None


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step"}  # bools as 0/1


@LOGGERS.register("tensorboard")
class TensorBoardLogger:
    """Event files under RUN_DIR/tensorboard (`tensorboard --logdir runs/`)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], log_dir: str = "") -> None:
        writer_cls = _import("torch.utils.tensorboard", "tensorboard").SummaryWriter
        self.writer = writer_cls(log_dir=log_dir or str(run_dir / "tensorboard"))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for k, v in _scalars(metrics).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@LOGGERS.register("wandb")
class WandbLogger:
    """A W&B run named after run.name; `mode: offline` (or $WANDB_MODE) needs no network."""

    def __init__(self, run_dir: Path, config: dict[str, Any], project: str = "turncredit",
                 mode: str | None = None, entity: str | None = None) -> None:
        wandb = _import("wandb", "wandb")
        self.run = wandb.init(project=project, entity=entity, name=config["run"]["name"], config=config,
                              dir=str(run_dir), mode=mode, resume="allow", id=_stable_id(run_dir))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(_scalars(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def _stable_id(run_dir: Path) -> str:
    """One W&B run per run directory, so a resumed run continues its curves."""
    import hashlib

    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]


def make_loggers(names: list[str], options: dict[str, dict[str, Any]], run_dir: Path,
                 config: dict[str, Any]) -> list[MetricLogger]:
    out = []
    for name in names:
        cls = LOGGERS.get(name)
        try:
            out.append(cls(run_dir, config, **options.get(name, {})))
        except TypeError as e:
            raise ValueError(f"run.logger_options.{name}: {e}") from None
    return out
