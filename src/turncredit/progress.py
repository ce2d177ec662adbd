"""Live progress of a training step on a terminal: episodes finished, then minibatches applied.

One tqdm bar per phase, on stderr, cleared when the phase ends (the step's own summary line is
printed by the command). Off when stderr is not a terminal (CI logs, `nohup`), so logs stay clean.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator, Literal, TextIO


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass


class Progress:
    def __init__(self, mode: Literal["auto", "always", "never"] = "auto", stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = mode == "always" or (mode == "auto" and hasattr(self.stream, "isatty") and self.stream.isatty())
        self.last = ""  # the previous step's key metrics, shown beside the bar

    @contextmanager
    def phase(self, desc: str, total: int, unit: str) -> Iterator[Any]:
        if not self.enabled:
            yield _Silent()
            return
        from tqdm.auto import tqdm

        # updates come a few times a second at most: draw every one
        with tqdm(total=total, desc=desc, unit=unit, file=self.stream, leave=False, dynamic_ncols=True,
                  mininterval=0.0, miniters=1) as bar:
            if self.last:
                bar.set_postfix_str(self.last)
            yield bar

    def step_done(self, m: dict[str, Any]) -> None:
        self.last = f"last step: success {100 * m['success_rate']:.0f}% reward {m['reward_mean']:+.2f}"
