"""Fault injection and retries for the calls an environment makes (oracles, judges, tools).

A long run meets failed requests, timeouts and nonsense replies. `call_with_retries` is the
one policy for them: retry with exponential backoff, then give up with `EnvFailure`, which
aborts only that episode (excluded from the loss, counted in the metrics). `FaultInjector`
produces such faults on purpose, at a configured rate, so tests and benchmarks can check that a
run survives them and that the counts add up.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from turncredit.errors import EnvFailure

T = TypeVar("T")

FAULT_KINDS = ("fail", "hang", "garbage")


class CallFailed(RuntimeError):
    """One attempt of an external call failed (error, timeout or unusable reply); it may be retried."""


@dataclass
class FaultOptions:
    #: probability that a call faults
    rate: float = 0.0
    #: the kinds drawn from, uniformly: "fail" (an error), "hang" (no reply until the caller's
    #: timeout), "garbage" (a reply that is not an answer)
    kinds: list[str] = field(default_factory=lambda: list(FAULT_KINDS))
    #: how long a hang blocks before it counts as a timeout
    hang_seconds: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"faults.rate: expected a probability in [0, 1], got {self.rate}")
        bad = [k for k in self.kinds if k not in FAULT_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"faults.kinds: expected some of {', '.join(FAULT_KINDS)}, got {self.kinds}")
        if self.hang_seconds < 0:
            raise ValueError(f"faults.hang_seconds: expected ≥ 0, got {self.hang_seconds}")


class FaultInjector:
    """Decides per call whether and how it faults (seeded, thread-safe) and counts each kind."""

    def __init__(self, options: FaultOptions) -> None:
        self.options = options
        self._rng = random.Random(options.seed)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def draw(self) -> str | None:
        with self._lock:
            if self._rng.random() >= self.options.rate:
                return None
            kind = self._rng.choice(self.options.kinds)
            self.counts[kind] += 1
            return kind

    def before_call(self) -> str | None:
        """Raise or stall as the drawn fault says; returns "garbage" when the reply must be spoilt."""
        kind = self.draw()
        if kind == "fail":
            raise CallFailed("injected fault: the call failed")
        if kind == "hang":
            time.sleep(self.options.hang_seconds)
            raise CallFailed(f"injected fault: no reply within {self.options.hang_seconds}s")
        return kind


_COUNTS_LOCK = threading.Lock()


def call_with_retries(fn: Callable[[], T], what: str, retries: int, backoff: float,
                      counts: Counter[str]) -> T:
    """`fn()`, retried on `CallFailed` up to `retries` times with backoff·2^i pauses, then
    `EnvFailure`; `counts["retries"]` and `counts["gave_up"]` record what happened."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except CallFailed as e:
            error = e
        if attempt < retries:
            with _COUNTS_LOCK:
                counts["retries"] += 1
            time.sleep(backoff * 2 ** attempt)
    with _COUNTS_LOCK:
        counts["gave_up"] += 1
    raise EnvFailure(f"{what} failed after {retries + 1} attempt(s): {error}")
