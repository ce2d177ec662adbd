"""Environments, registered by name in `ENVS`."""

from turncredit.envs.base import ENVS, EnvFailure, MultiTurnEnv, StepResult, Task, make_env
from turncredit.envs import multi_answer_qa, peer_workload, twenty_questions  # noqa: F401  (register their names)

__all__ = ["ENVS", "EnvFailure", "MultiTurnEnv", "StepResult", "Task", "make_env"]
