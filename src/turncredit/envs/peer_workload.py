"""The fixed rollout workload of the peer throughput harness (`shared/peers/README.md`).

A 20 Questions game whose oracle costs nothing: "Yes." and a win when the question names the
secret as a whole word, "No." otherwise. It exists so that turncredit's engine runs exactly the
workload the naive loop, TRL and the hardware limit were measured on; it teaches nothing.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from turncredit.envs.base import ENVS, MultiTurnEnv, StepResult, Task

WORDS = (
    "apple", "banana", "carrot", "dog", "cat", "horse", "elephant", "giraffe",
    "chair", "table", "lamp", "book", "pencil", "guitar", "piano", "drum",
    "car", "bicycle", "train", "airplane", "boat", "rocket", "house", "bridge",
    "tree", "flower", "rose", "cactus", "mountain", "river", "ocean", "cloud",
    "sun", "moon", "star", "hammer", "knife", "spoon", "fork", "cup",
    "bottle", "shoe", "hat", "shirt", "umbrella", "clock", "phone", "computer",
    "camera", "key", "door", "window", "bed", "pillow", "blanket", "candle",
    "mirror", "ball", "kite", "balloon", "egg", "bread", "cheese", "pizza",
)
SYSTEM_PROMPT = (
    "You are the questioner in a game of 20 Questions. The user has secretly chosen a common "
    "concrete object. Ask exactly one yes/no question per turn to find out what it is. "
    "When you want to guess, say 'Is it <word>?'."
)
FIRST_USER = "I have chosen a secret object. Ask your first question."
SEED = 1234


@dataclass
class PeerWorkloadOptions:
    max_turns: int = 8
    secrets_per_step: int = 8


@dataclass
class PeerWorkloadState:
    secret: str
    done: bool = False


def secrets_for_step(step: int, n: int = 8) -> list[str]:
    """The harness's secrets for one step: `random.Random(1234 + step).sample(WORDS, n)`."""
    return random.Random(SEED + step).sample(list(WORDS), n)


@ENVS.register("peer_20q")
class PeerWorkloadEnv(MultiTurnEnv):
    Options = PeerWorkloadOptions

    def tasks(self, split: str) -> list[Task]:
        return [Task(task_id=w, data={"secret": w}) for w in WORDS]

    def step_tasks(self, step: int) -> list[Task]:
        return [Task(task_id=w, data={"secret": w})
                for w in secrets_for_step(step, self.options.secrets_per_step)]

    def reset(self, task: Task, rng: random.Random) -> tuple[list[dict[str, str]], PeerWorkloadState]:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": FIRST_USER}]
        return messages, PeerWorkloadState(secret=str(task.data["secret"]))

    def step(self, state: PeerWorkloadState, action_text: str) -> StepResult:
        hit = re.search(r"\b" + re.escape(state.secret) + r"\b", action_text.strip().lower()) is not None
        state.done = hit
        return StepResult(reply="Yes." if hit else "No.", reward=1.0 if hit else 0.0, done=hit, success=hit)
