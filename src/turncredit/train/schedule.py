"""Learning-rate warm-up for the policy update.

Adam's first steps are nearly sign-SGD: with bias correction, step 1 moves every weight by
lr·g/|g| = ±lr whatever the gradient's size, and the next few steps barely less. Measured on the
20 Questions main job (SmolLM2-135M): the update's approx KL in the first RL step was 0.02 at
lr 5e-5 (2 minibatches) and 0.2–0.3 at lr 1e-4 (4 minibatches), after which one run won 6 % of
its next step's training games instead of 47 % (benchmarks/20q-learning-diagnosis.md). A short
linear warm-up keeps those first, gradient-blind steps small.
"""

from __future__ import annotations

import torch

__all__ = ["optimizer_steps_taken", "set_lr", "warmup_lr", "warmup_steps"]


def warmup_lr(lr: float, steps_taken: int, warmup_steps: int) -> float:
    """The rate of the next optimizer step, `steps_taken` having been taken:

        lr_k = lr · min(1, (k + 1) / W)      k = steps_taken, W = warmup_steps (W = 0: lr)

    so with W = 4 the first four steps use lr/4, lr/2, 3lr/4, lr.
    """
    if warmup_steps <= 0:
        return lr
    return lr * min(1.0, (steps_taken + 1) / warmup_steps)


def warmup_steps(steps: int, ratio: float, total_optimizer_steps: int) -> int:
    """W for `warmup_lr`: `steps` when set (> 0), else ⌊ratio · total⌋ — verl's
    lr_warmup_steps / lr_warmup_steps_ratio, where a positive step count wins over the ratio."""
    return steps if steps > 0 else int(ratio * total_optimizer_steps)


def optimizer_steps_taken(optimizer: torch.optim.Optimizer) -> int:
    """Steps the optimizer has applied, read from its own state (so a resumed run, whose state
    was restored from the checkpoint, continues the schedule where it stopped)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if step is not None:
                return int(step)
    return 0


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
