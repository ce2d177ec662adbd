"""The environment protocol: a small class per environment, registered by name.

An environment turns a task into opening chat messages and answers each action with a reply,
a turn reward and whether the episode ended. It never sees tokens: bridging text to tokens is
the rollout engine's job (`turncredit.chat`), so every environment is token-exact for free.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from turncredit.episode import Episode, Task, Turn, TurnRecord  # noqa: F401  (Task, TurnRecord re-exported)
from turncredit.errors import EnvFailure  # noqa: F401  (re-exported: environments raise it)
from turncredit.registry import Registry


@dataclass
class StepResult:
    reply: str  # the environment's message to the policy (rendered as the next user turn)
    reward: float  # this turn's reward
    done: bool
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # free-form notes for people (`Turn.info`); no stage reads it
    #: the reply without end-of-game text that reveals what the policy had to find out (a lost
    #: 20 Questions game's "Game over. The answer was X."); None when the reply is all answer.
    #: A belief about the secret must never be scored on the reveal (ΔBelief)
    answer: str | None = None
    #: how much this turn's reply raised the exact log posterior of what the policy has to find
    #: out (nats), where the environment can compute one: in 20 Questions with listed candidates,
    #: log(consistent words before / consistent words after). None where it cannot
    belief_gain: float | None = None
    #: the environment's verdict on the turn (`Turn.label`)
    label: str = ""
    #: the end-of-game part of `reward` on the last turn, where the environment separates it
    outcome_reward: float | None = None
    #: the environment's own typed per-turn data (a `TurnRecord` dataclass of that environment)
    record: TurnRecord | None = None

    def to_turn(self, action_text: str, prompt_ids: list[int] | None = None, action_ids: list[int] | None = None,
                sampler_logprobs: list[float] | None = None, truncated_action: bool = False) -> Turn:
        """The turn this result answers, with everything the environment said about it: the one
        place a step's result becomes what the later stages read."""
        return Turn(
            prompt_ids=[] if prompt_ids is None else prompt_ids,
            action_ids=[] if action_ids is None else action_ids,
            sampler_logprobs=[] if sampler_logprobs is None else sampler_logprobs,
            action_text=action_text, observation=self.reply, reward=self.reward, info=dict(self.info),
            answer=self.answer, belief_gain=self.belief_gain, label=self.label, env_reward=self.reward,
            outcome_reward=self.outcome_reward, truncated_action=truncated_action,
            record=self.record.to_dict() if self.record is not None else {},
        )


class MultiTurnEnv(ABC):
    """One episode's state lives in the object `reset` returns, so one env serves a batch."""

    #: a dataclass type holding this environment's options (validated from the config)
    Options: ClassVar[type]
    #: the turn labels whose share of all turns this environment reports, by metric name
    #: (20 Questions: {"repeated_rate": "Repeated", "invalid_rate": "Invalid"}); see `label_rates`
    LABEL_RATES: ClassVar[dict[str, str]] = {}

    def __init__(self, options: Any) -> None:
        self.options = options
        self._pool: tuple[int, ThreadPoolExecutor] | None = None  # (workers, pool)

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """All tasks of a split ('train', 'val', 'test')."""

    def sample_tasks(self, split: str, n: int, rng: random.Random) -> list[Task]:
        pool = self.tasks(split)
        if n <= len(pool):
            return rng.sample(pool, n)
        return [rng.choice(pool) for _ in range(n)]

    @abstractmethod
    def reset(self, task: Task, rng: random.Random) -> tuple[list[dict[str, str]], Any]:
        """Opening messages for the policy and this episode's fresh state."""

    @abstractmethod
    def step(self, state: Any, action_text: str) -> StepResult:
        """Answer one action; `state` is mutated in place."""

    def step_batch(self, states: Sequence[Any], actions: Sequence[str]) -> list[StepResult | EnvFailure]:
        """Answer one turn of every active episode; a failed episode gets its `EnvFailure` back.

        With `options.concurrency` > 1 the calls overlap on a thread pool kept by the env, which
        pays off when `step` waits on a server (an LLM judge, a search tool); a CPU-bound oracle
        keeps the default of 1. Results come back in the order of `states`. An environment that
        can answer a whole batch in one request overrides this.
        """
        if len(states) != len(actions):
            raise ValueError(f"step_batch: {len(states)} states but {len(actions)} actions")
        workers = min(int(getattr(self.options, "concurrency", 1)), len(states))
        if workers <= 1:
            return [self._step_or_failure(s, a) for s, a in zip(states, actions)]
        pool = getattr(self, "_pool", None)
        if pool is None or pool[0] < workers:
            if pool is not None:
                pool[1].shutdown(wait=False)
            pool = self._pool = (workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="env-step"))
        return list(pool[1].map(self._step_or_failure, states, actions))

    def _step_or_failure(self, state: Any, action: str) -> StepResult | EnvFailure:
        try:
            return self.step(state, action)
        except EnvFailure as e:
            return e

    def find_task(self, task_id: str) -> Task:
        """The task of that id in any split (for `turncredit play --task`)."""
        for split in ("train", "val", "test"):
            for task in self.tasks(split):
                if task.task_id == task_id:
                    return task
        raise ValueError(f"no task {task_id!r} in the train, val or test split")

    def expert(self, **options: Any) -> Any:
        """A scripted player for demonstrations and a ceiling: `play(env, task, rng) -> Episode`,
        or None when this environment has none; `options` are its own (`sft.expert_options`)."""
        return None

    def counters(self) -> dict[str, int]:
        """Cumulative counts of what went wrong outside the policy (oracle retries, injected
        faults, calls given up); the trainer logs each step's increase."""
        return {}

    def summarize(self, episodes: Sequence[Any]) -> dict[str, float]:
        """This environment's own metrics over finished episodes (added to eval and train logs)."""
        return {}

    def label_rates(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """The share of all turns given each label of `LABEL_RATES` (in eval and train logs; the
        environment says which of its labels are worth a rate, so no stage assumes any)."""
        labels = Counter(t.label for ep in episodes for t in ep.turns)
        n = max(1, sum(labels.values()))
        return {name: labels[label] / n for name, label in self.LABEL_RATES.items()}

    @property
    def max_turns(self) -> int:
        return int(self.options.max_turns)


ENVS: Registry[type[MultiTurnEnv]] = Registry("environment")


def make_env(name: str, options: Any) -> MultiTurnEnv:
    return ENVS.get(name)(options)
