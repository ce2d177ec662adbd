"""`process_grpo` — GRPO with process supervision (DeepSeekMath, Shao et al. 2024, §4.1.3).

Every step reward of a group is normalised by the mean and std of *all* the group's step
rewards, and a step's advantage is the (discounted) sum of the normalised rewards from that
step on:

    r̃_{i,t} = (r_{i,t} − mean_{j,s} r_{j,s}) / (std_{j,s} r_{j,s} + ε)
    A_{i,t} = Σ_{s ≥ t} γ^{s−t} r̃_{i,s}              (γ = 1: the paper's sum)

over the steps s of the trajectories j of i's group, unbiased (n−1) std, ε = 1e-6 outside the
root. Unlike `turn_grpo`, a turn is not compared with whatever the other trajectories happened
to do at the same turn index (which, once their games have diverged, are different states): a
guess that rules nothing out is below the group's typical step wherever it falls. γ = 0 keeps
only the step's own normalised reward. A group whose step rewards have std ≤ ε gets 0.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.grpo import group_std
from turncredit.credit.registry import ESTIMATORS, group_indices


@ESTIMATORS.register("process_grpo")
def process_grpo(
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    *,
    gamma: float = 1.0,
    epsilon: float = 1e-6,
) -> list[list[float]]:
    """A_{i,t} = Σ_{s≥t} γ^{s−t} (r_{i,s} − mean_g r) / (std_g r + ε), all steps of the group pooled."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"process_grpo: gamma must be in [0, 1], got {gamma!r}")
    if not epsilon >= 0:
        raise ValueError(f"process_grpo: epsilon must be >= 0, got {epsilon!r}")
    adv = [[0.0] * len(r) for r in step_rewards]
    for members in group_indices(group_ids).values():
        pooled = [x for i in members for x in step_rewards[i]]
        if not pooled:
            continue
        mean = math.fsum(pooled) / len(pooled)
        std = group_std(pooled, mean)
        if std <= epsilon:
            continue  # no spread among the group's steps: nothing to prefer
        for i in members:
            to_go = 0.0
            for t in reversed(range(len(step_rewards[i]))):
                to_go = (step_rewards[i][t] - mean) / (std + epsilon) + gamma * to_go
                adv[i][t] = to_go
    return adv
