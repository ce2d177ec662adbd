"""README's "A new environment" example is a working environment, not prose that drifted."""

from __future__ import annotations

import random
import re
from pathlib import Path

from turncredit.envs.base import MultiTurnEnv, StepResult, Task
from turncredit.envs.peer_workload import FIRST_USER, WORDS, PeerWorkloadOptions, PeerWorkloadState
from turncredit.registry import Registry

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("### A new environment", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_environment_registers_resets_and_answers():
    envs: Registry = Registry("environment")
    names = {"ENVS": envs, "MultiTurnEnv": MultiTurnEnv, "Task": Task, "StepResult": StepResult, "WORDS": WORDS,
             "FIRST_USER": FIRST_USER, "PeerWorkloadOptions": PeerWorkloadOptions,
             "PeerWorkloadState": PeerWorkloadState}
    exec(readme_example(), names)
    env = envs.get("peer_20q")(PeerWorkloadOptions())
    task = env.tasks("train")[0]
    messages, state = env.reset(task, random.Random(0))
    assert messages[-1]["content"] == FIRST_USER
    miss, hit = env.step(state, "Is it alive?"), env.step(state, f"Is it a {task.task_id}?")
    assert (miss.reward, miss.done, hit.reward, hit.done, hit.success) == (0.0, False, 1.0, True, True)
