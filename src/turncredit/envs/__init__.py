"""Environments, registered by name in `ENVS`."""

from turncredit.envs.base import ENVS, EnvFailure, MultiTurnEnv, StepResult, Task, make_env
from turncredit.envs import twenty_questions  # noqa: F401  (registers "twenty_questions")

__all__ = ["ENVS", "EnvFailure", "MultiTurnEnv", "StepResult", "Task", "make_env"]
