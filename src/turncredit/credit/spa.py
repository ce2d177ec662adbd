"""`spa` — SPADER's step-wise peer advantage: compare each step's return-to-go with its peers'.

    G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k}                         (return-to-go, γ = 0.9)
    μ_t     = (1/n) Σ_j G_{j,t}
    Var_t   = (1/n) Σ_j (G_{j,t} − μ_t)²                      (population variance)
    A_{i,t} = (G_{i,t} − μ_t) / sqrt(Var_t + ε)               (normalize_std=True, the default)
    A_{i,t} =  G_{i,t} − μ_t                                  (normalize_std=False)

Trajectories of a group are aligned by decision step t. A trajectory that has already finished
counts as G = 0 at every later step up to the group's longest trajectory (it is a peer that
gains nothing more), so the n above is always the group size. A one-trajectory group gets 0.
There is no separate episode term: put the final score (F1) in the last step's reward.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.registry import ESTIMATORS, group_indices


def returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + γ·G_{t+1}, computed backwards."""
    out = [0.0] * len(rewards)
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


@ESTIMATORS.register("spa")
def spa(
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    *,
    gamma: float = 0.9,
    normalize_std: bool = True,
    epsilon: float = 1e-6,
) -> list[list[float]]:
    """A_{i,t} = (G_{i,t} − μ_t) / sqrt(Var_t + ε) over the group at step t (finished → G = 0)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"spa: gamma must be in [0, 1], got {gamma!r}")
    if not epsilon >= 0:
        raise ValueError(f"spa: epsilon must be >= 0, got {epsilon!r}")
    rtg = [returns_to_go(r, gamma) for r in step_rewards]
    adv = [[0.0] * len(r) for r in step_rewards]
    for members in group_indices(group_ids).values():
        n = len(members)
        if n < 2:
            continue
        for t in range(max(len(rtg[i]) for i in members)):
            g = [rtg[i][t] if t < len(rtg[i]) else 0.0 for i in members]
            mu = math.fsum(g) / n
            var = math.fsum((x - mu) ** 2 for x in g) / n
            scale = math.sqrt(var + epsilon) if normalize_std else 1.0
            if scale == 0.0:
                continue  # ε = 0 and no spread: nothing to prefer
            for i, x in zip(members, g):
                if t < len(adv[i]):
                    adv[i][t] = (x - mu) / scale
    return adv
