"""`turn_grpo` — the ΔBelief-RL paper's turn-wise group normalisation.

    A_{i,t} = (r_{i,t} − mean_j r_{j,t}) / (std_j r_{j,t} + ε)     (normalize_std=True, the default)
    A_{i,t} =  r_{i,t} − mean_j r_{j,t}                            (normalize_std=False)

over the trajectories j of i's group at the same turn index t, unbiased (n−1) std, ε = 1e-6
outside the root, no discounting. A trajectory that has finished counts as r = 0 at every later
turn index up to the group's longest trajectory. A one-trajectory group uses mean 0, std 1
(the verl convention), i.e. A = r; a turn index whose std ≤ ε gives 0.

`outcomes` (optional, one per trajectory) with `outcome_to_every_turn=True` adds trajectory i's
end-of-game reward o_i to each of its turns before the last (the last one already holds it):
r'_{i,t} = r_{i,t} + o_i for t < T_i, as the paper's CIA recipe does.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.grpo import group_std
from turncredit.credit.registry import ESTIMATORS, group_indices


def with_outcome_on_every_turn(step_rewards: Sequence[Sequence[float]], outcomes: Sequence[float]) -> list[list[float]]:
    """r'_{i,t} = r_{i,t} + o_i for every turn but the last (which already includes o_i)."""
    if len(outcomes) != len(step_rewards):
        raise ValueError(f"outcomes has {len(outcomes)} entries, expected one per trajectory ({len(step_rewards)})")
    return [[r + (o if t < len(row) - 1 else 0.0) for t, r in enumerate(row)] for row, o in zip(step_rewards, outcomes)]


@ESTIMATORS.register("turn_grpo")
def turn_grpo(
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    *,
    normalize_std: bool = True,
    epsilon: float = 1e-6,
    outcome_to_every_turn: bool = False,
    outcomes: Sequence[float] | None = None,
) -> list[list[float]]:
    """A_{i,t} = (r_{i,t} − mean_j r_{j,t}) / (std_j r_{j,t} + ε) within the group at turn t."""
    if not epsilon >= 0:
        raise ValueError(f"turn_grpo: epsilon must be >= 0, got {epsilon!r}")
    if outcome_to_every_turn:
        if outcomes is None:
            raise ValueError("turn_grpo: outcome_to_every_turn needs `outcomes`, one end-of-game reward per trajectory")
        step_rewards = with_outcome_on_every_turn(step_rewards, [float(o) for o in outcomes])
    adv = [[0.0] * len(r) for r in step_rewards]
    for members in group_indices(group_ids).values():
        for t in range(max(len(step_rewards[i]) for i in members)):
            r = [step_rewards[i][t] if t < len(step_rewards[i]) else 0.0 for i in members]
            if len(members) == 1:
                mean, std = 0.0, 1.0
            else:
                mean = math.fsum(r) / len(r)
                std = group_std(r, mean) if normalize_std else 1.0
                if normalize_std and std <= epsilon:
                    continue  # no spread at this turn: nothing to prefer
            for i, x in zip(members, r):
                if t < len(adv[i]):
                    adv[i][t] = (x - mean) / (std + epsilon) if normalize_std else x - mean
    return adv
