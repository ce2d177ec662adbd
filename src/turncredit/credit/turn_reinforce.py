"""`turn_reinforce` — each turn's own reward as its advantage, with at most a partial baseline.

    A_{i,t} = r_{i,t} − β · mean_j r_{j,t}          (β = `baseline_weight`, 0 by default)

over the trajectories j of i's group at the same turn index t (a finished trajectory counts as
r = 0, as in `turn_grpo`), no std normalisation, no discounting: REINFORCE on the immediate
(shaped) reward, a valid policy gradient of the per-turn objective with any β ∈ [0, 1].

Why not centre fully (β = 1, `turn_grpo` without the std): a penalty that every peer pays at
the same turn cancels. Under the exact ΔBelief shaping a question that rules nothing out costs
−c; where all of a group's turns at an index are idle they all get advantage 0, and where they
are idle of different kinds the cheaper kind gets a *positive* advantage, so training moves
the idle share from one kind to another instead of shrinking it
(benchmarks/20q-learning-diagnosis.md, K). With β < 1 every idle turn keeps a negative
advantage, whatever its peers did.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.registry import ESTIMATORS, group_indices


@ESTIMATORS.register("turn_reinforce")
def turn_reinforce(
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    *,
    baseline_weight: float = 0.0,
) -> list[list[float]]:
    """A_{i,t} = r_{i,t} − β·mean_j r_{j,t} within the group at turn index t."""
    if not 0.0 <= baseline_weight <= 1.0:
        raise ValueError(f"turn_reinforce: baseline_weight must be in [0, 1], got {baseline_weight!r}")
    adv = [[float(r) for r in row] for row in step_rewards]
    if baseline_weight == 0.0:
        return adv
    for members in group_indices(group_ids).values():
        for t in range(max(len(step_rewards[i]) for i in members)):
            r = [step_rewards[i][t] if t < len(step_rewards[i]) else 0.0 for i in members]
            mean = math.fsum(r) / len(r)
            for i in members:
                if t < len(adv[i]):
                    adv[i][t] -= baseline_weight * mean
    return adv
