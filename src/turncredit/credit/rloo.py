"""`rloo` — REINFORCE leave-one-out baseline.

    R_i = Σ_t r_{i,t}
    A_i = R_i − mean_{j≠i} R_j = R_i − (Σ_j R_j − R_i) / (n − 1)
    A_{i,t} = A_i  for every step t of trajectory i

A one-trajectory group has no other trajectory to compare with and gets 0.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.registry import ESTIMATORS, broadcast, group_indices, trajectory_returns


@ESTIMATORS.register("rloo")
def rloo(
    group_ids: Sequence[Hashable], step_rewards: Sequence[Sequence[float]]
) -> list[list[float]]:
    """A_i = R_i − mean of the other trajectories' returns in i's group."""
    returns = trajectory_returns(step_rewards)
    adv = [0.0] * len(returns)
    for members in group_indices(group_ids).values():
        n = len(members)
        if n < 2:
            continue
        total = math.fsum(returns[i] for i in members)
        for i in members:
            adv[i] = returns[i] - (total - returns[i]) / (n - 1)
    return broadcast(adv, step_rewards)
