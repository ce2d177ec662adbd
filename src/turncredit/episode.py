"""The one data model every stage speaks: an `Episode` is a list of `Turn`s.

A turn holds exactly the tokens that entered the model's context: `prompt_ids` are the tokens
appended *before* the action (the opening prompt for turn 0, the bridged environment reply plus
the generation prompt afterwards) and `action_ids` are the policy's own sampled tokens. The
training sequence is therefore `concat(prompt_ids + action_ids for each turn)`, never a
re-tokenisation of text.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from turncredit.jsonl import iter_jsonl


@dataclass
class Turn:
    prompt_ids: list[int]
    action_ids: list[int]
    sampler_logprobs: list[float]
    action_text: str
    observation: str = ""
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    advantage: float | None = None  # filled by the credit stage
    #: the observation without end-of-game text that reveals the answer (`StepResult.answer`);
    #: None when the observation is all answer
    answer: str | None = None
    #: the environment's exact rise in log posterior of the answer this turn (`StepResult.belief_gain`)
    belief_gain: float | None = None
    #: a cost a reward shaper charges to the turn's *advantage* (subtracted after the credit
    #: estimator, so no group or turn-index baseline cancels it when every peer paid it too)
    advantage_penalty: float = 0.0

    @property
    def num_action_tokens(self) -> int:
        return len(self.action_ids)


@dataclass
class Episode:
    task: dict[str, Any]
    group_id: str
    messages: list[dict[str, str]]  # the opening chat messages (system, user)
    turns: list[Turn] = field(default_factory=list)
    outcome: float = 0.0
    success: bool = False
    aborted: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

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
        """1 on the policy's own tokens, 0 on everything the environment or template added."""
        mask: list[int] = []
        for t in self.turns:
            mask += [0] * len(t.prompt_ids) + [1] * len(t.action_ids)
        return mask

    def chat(self) -> list[dict[str, str]]:
        """The dialogue as chat messages (for reading, SFT, or a text-only backend)."""
        out = [dict(m) for m in self.messages]
        for i, t in enumerate(self.turns):
            out.append({"role": "assistant", "content": t.action_text})
            if t.observation and i < len(self.turns) - 1:
                out.append({"role": "user", "content": t.observation})
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "episode") -> "Episode":
        _check_keys(d, cls, where)
        turns = []
        for i, t in enumerate(d.get("turns", [])):
            _check_keys(t, Turn, f"{where}.turns[{i}]")
            turns.append(Turn(**t))
        return cls(**{**d, "turns": turns})


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
