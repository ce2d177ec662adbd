"""A policy backend that plays fixed text (as real token ids), for tests that need valid actions
from a model that cannot write them (the tiny random model)."""

from __future__ import annotations

from typing import Sequence

from turncredit.chat import ChatBridge
from turncredit.generation import Generation
from turncredit.policy.session import PolicySession


class ScriptedBackend:
    """Row r's n-th action is `actions[(n + r % period) % len(actions)]` (period 1: the same
    script for every row; period = group size: members of a group differ, the same way however
    the groups are batched); records the prompts it was given."""

    tokens_prefilled = 0

    def __init__(self, tokenizer, bridge: ChatBridge, actions: Sequence[str], period: int = 1) -> None:
        self.tokenizer, self.bridge, self.actions = tokenizer, bridge, list(actions)
        self.period = period
        self.seen_prompts: list[str] = []
        self._turn: dict[int, int] = {}

    def start(self, n_rows: int, seed: int) -> "ScriptedBackend":
        self._turn = {}
        self._next_row = n_rows
        return self

    def add_rows(self, n: int) -> list[int]:
        self._next_row += n
        return list(range(self._next_row - n, self._next_row))

    def generate(self, rows, new_tokens, params) -> list[Generation]:
        out = []
        for r, prompt in zip(rows, new_tokens):
            self.seen_prompts.append(self.tokenizer.decode(prompt))
            n = self._turn.get(r, 0)
            self._turn[r] = n + 1
            text = self.actions[(n + r % self.period) % len(self.actions)]
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.bridge.end_of_turn_id]
            out.append(Generation(ids=ids, logprobs=[0.0] * len(ids)))
        return out

    def finish(self, rows) -> None:
        pass


def scripted_session(model, tokenizer, actions: Sequence[str], period: int = 1) -> PolicySession:
    """A session that trains `model` but samples the scripted actions."""
    bridge = ChatBridge(tokenizer)
    return PolicySession(model=model, tokenizer=tokenizer, bridge=bridge,
                         backend=ScriptedBackend(tokenizer, bridge, actions, period))
