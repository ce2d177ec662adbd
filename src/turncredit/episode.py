"""The one data model every stage speaks: an `Episode` is a list of `Turn`s.

A turn holds exactly the tokens that entered the model's context: `prompt_ids` are the tokens
appended *before* the action (the opening prompt for turn 0, the bridged environment reply plus
the generation prompt afterwards) and `action_ids` are the policy's own sampled tokens. The
training sequence is therefore `concat(prompt_ids + action_ids for each turn)`, never a
re-tokenisation of text.

Stages exchange typed fields, never keys of a dict: the environment's verdict (`Turn.label`),
its own reward and the end-of-game part of it (`env_reward`, `outcome_reward`), its per-turn
record (`Turn.record`, read back through the environment's `TurnRecord` class), why an episode
was aborted and the belief trajectory (`Episode.abort_reason`, `Episode.log_beliefs`). `info`
on either is free-form data for people reading episodes; no stage decides on it.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, TypeVar

from turncredit.jsonl import iter_jsonl

R = TypeVar("R", bound="TurnRecord")


@dataclass
class Task:
    """One task of an environment (here, below the environments, so episodes can hold it)."""

    task_id: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, **self.data}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "task") -> "Task":
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
        data = dict(d)
        return cls(task_id=str(data.pop("task_id", "")), data=data)


class TurnRecord:
    """Base of an environment's own per-turn record: subclass it as a dataclass whose fields
    all have defaults. The environment returns one in `StepResult.record`; the turn keeps it as
    a plain dict (`Turn.record`), so an episode file needs no type registry to load, and a stage
    reads it back typed with `SomeRecord.of(turn)`."""

    @classmethod
    def of(cls: type[R], turn: "Turn") -> R:
        return cls.from_dict(turn.record)

    @classmethod
    def from_dict(cls: type[R], d: dict[str, Any]) -> R:
        _check_keys(d, cls, cls.__name__)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass
class Turn:
    prompt_ids: list[int]
    action_ids: list[int]
    sampler_logprobs: list[float]
    action_text: str
    observation: str = ""
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # free-form, for people reading episodes
    advantage: float | None = None  # filled by the credit stage
    #: the observation without end-of-game text that reveals the answer (`StepResult.answer`);
    #: None when the observation is all answer
    answer: str | None = None
    #: the environment's exact rise in log posterior of the answer this turn (`StepResult.belief_gain`)
    belief_gain: float | None = None
    #: a cost a reward shaper charges to the turn's *advantage* (subtracted after the credit
    #: estimator, so no group or turn-index baseline cancels it when every peer paid it too)
    advantage_penalty: float = 0.0
    #: the environment's verdict on the turn (20 Questions: Yes / No / Invalid / Repeated / Finished)
    label: str = ""
    #: the environment's own reward, before any shaper added to `reward`; None on a hand-made turn
    env_reward: float | None = None
    #: the end-of-game part of the last turn's reward, where the environment separates it
    #: (`turn_grpo` can spread it over the turns); None elsewhere
    outcome_reward: float | None = None
    #: the action hit the token limit before its end-of-turn token
    truncated_action: bool = False
    #: the environment's own per-turn record (`StepResult.record` as a dict): read it with that
    #: environment's `TurnRecord` class (`QARecord.of(turn)`), never by key
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    task: Task
    group_id: str
    messages: list[dict[str, str]]  # the opening chat messages (system, user)
    turns: list[Turn] = field(default_factory=list)
    outcome: float = 0.0
    success: bool = False
    aborted: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # free-form, for people reading episodes
    #: why the episode was aborted (an `EnvFailure`'s message, or a person quitting); "" otherwise
    abort_reason: str = ""
    #: log b_t of the secret for t = 0..T, where a ΔBelief shaper scored them (`rewards.belief`)
    log_beliefs: list[float] | None = None
    #: a guided group member (`turncredit.guidance`): the environment's expert played its turns
    #: from this index on (no sampler log-probs), and the turns before it are a peer's, context
    #: only here (they are trained on as that peer's). None: the policy's own episode
    expert_from: int | None = None

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def step_rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    def token_ids(self) -> list[int]:
        """The training sequence: every prompt and action token, in context order."""
        ids: list[int] = []
        for t in self.turns:
            ids += t.prompt_ids + t.action_ids
        return ids

    def action_mask(self) -> list[int]:
        """1 on the action tokens the loss trains on, 0 on everything the environment or template
        added and on a guided episode's borrowed turns (those before `expert_from`)."""
        mask: list[int] = []
        for i, t in enumerate(self.turns):
            mask += [0] * len(t.prompt_ids) + [int(self.in_loss(i))] * len(t.action_ids)
        return mask

    def in_loss(self, i: int) -> bool:
        """Whether turn i's action is trained on: all of the policy's own; a guided episode's from `expert_from` on."""
        return self.expert_from is None or i >= self.expert_from

    def sampled(self, i: int) -> bool:
        """Whether the policy sampled turn i's action (it has sampler log-probs), not the expert."""
        return self.expert_from is None or i < self.expert_from

    def chat(self) -> list[dict[str, str]]:
        """The dialogue as chat messages (for reading, SFT, or a text-only backend)."""
        out = [dict(m) for m in self.messages]
        for i, t in enumerate(self.turns):
            out.append({"role": "assistant", "content": t.action_text})
            if t.observation and i < len(self.turns) - 1:
                out.append({"role": "user", "content": t.observation})
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; the task flat (`Task.to_dict`), as episode files have always held it."""
        return {**asdict(self), "task": self.task.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "episode") -> "Episode":
        """Load one episode, an older file's too (see `_upgrade`)."""
        _check_keys(d, cls, where)
        d = _upgrade(d, _EPISODE_INFO_KEYS)
        turns = []
        for i, t in enumerate(d.get("turns", [])):
            _check_keys(t, Turn, f"{where}.turns[{i}]")
            turns.append(Turn(**_upgrade(t, _TURN_INFO_KEYS)))
        return cls(**{**d, "task": Task.from_dict(d["task"], f"{where}.task"), "turns": turns})


#: what older episode files kept in `info` and is a typed field now (the environment's own
#: per-turn keys, such as 20 Questions' "category", stay in `info` for people to read)
_TURN_INFO_KEYS = ("label", "env_reward", "outcome_reward", "truncated_action")
_EPISODE_INFO_KEYS = ("abort_reason", "log_beliefs")


def _upgrade(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """An older file's object with its `info` keys moved to the typed fields that replaced them."""
    info = d.get("info")
    if not isinstance(info, dict) or not any(k in info and k not in d for k in keys):
        return d
    moved = {k: info[k] for k in keys if k in info and k not in d}
    return {**d, **moved, "info": {k: v for k, v in info.items() if k not in moved}}


def _check_keys(d: Any, cls: type, where: str) -> None:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    unknown = set(d) - names
    missing = required - set(d)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    if missing:
        raise ValueError(f"{where}: missing field(s) {sorted(missing)}")


def write_episodes(path: str | Path, episodes: Iterable[Episode]) -> None:
    """Write JSONL atomically (temp file, then rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_episodes(path: str | Path) -> list[Episode]:
    return [Episode.from_dict(d, where=where) for where, d in iter_jsonl(path, "episode")]
