"""What the rollout engine asks of a generation backend, on the ground floor: sampling settings,
a sampled action, and the small stateful interface every backend implements. The engine and
the environments' tools import these without importing any backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 50
    greedy: bool = False
    top_k: int = 0  # 0 = no top-k cut

    @classmethod
    def of(cls, section: Any, greedy: bool = False) -> "SamplingParams":
        """From a config section with temperature, top_p, top_k, max_new_tokens (rollout or eval)."""
        return cls(section.temperature, section.top_p, section.max_new_tokens, greedy=greedy, top_k=section.top_k)


@dataclass
class Generation:
    ids: list[int]
    logprobs: list[float]  # the sampler's log-probs of `ids` (after temperature / top-p)


class GenerationState(Protocol):
    #: tokens put through the model by prefill forwards so far (prompt, replies, re-encoded history)
    tokens_prefilled: int

    def generate(self, rows: Sequence[int], new_tokens: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Append `new_tokens[j]` to row `rows[j]`, then sample one action per row."""

    def finish(self, rows: Sequence[int]) -> None:
        """These rows are done; free what they hold."""

    def add_rows(self, n: int) -> list[int]:
        """Open `n` more rows, empty, for episodes that start now; returns their ids (the next
        unused ones, in order)."""


class PolicyBackend(Protocol):
    def start(self, n_rows: int, seed: int) -> GenerationState: ...
