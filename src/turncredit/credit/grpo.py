"""`grpo` — StarPO's trajectory-level group-relative advantage.

    R_i = Σ_t r_{i,t}
    A_i = (R_i − mean_g R) / (std_g R + ε)        (normalize_std=True, the default)
    A_i =  R_i − mean_g R                         (normalize_std=False, Dr.GRPO style)
    A_{i,t} = A_i  for every step t of trajectory i

std_g is the unbiased (n−1) std by default (std="population" divides by n), and ε sits outside
the square root. A group whose std ≤ ε, and a one-trajectory group, gets 0 (in both modes:
a group without reward spread carries no signal). With clip_range=(lo, hi) the advantage is
clipped to [lo, hi] afterwards (RAGEN's asym_clip is (−1, 3)).
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.registry import ESTIMATORS, broadcast, group_indices, trajectory_returns

STD_KINDS = ("unbiased", "population")


def group_std(values: Sequence[float], mean: float, kind: str = "unbiased") -> float:
    """sqrt(Σ (x − mean)² / d) with d = n − 1 ("unbiased") or n ("population"); 0 if d ≤ 0."""
    if kind not in STD_KINDS:
        raise ValueError(f"std must be one of {STD_KINDS}, got {kind!r}")
    d = len(values) - 1 if kind == "unbiased" else len(values)
    if d <= 0:
        return 0.0
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / d)


@ESTIMATORS.register("grpo")
def grpo(
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    *,
    normalize_std: bool = True,
    std: str = "unbiased",
    epsilon: float = 1e-6,
    clip_range: tuple[float, float] | None = None,
) -> list[list[float]]:
    """A_i = (R_i − mean_g R) / (std_g R + ε), the same on every step of trajectory i."""
    if std not in STD_KINDS:
        raise ValueError(f"grpo: std must be one of {STD_KINDS}, got {std!r}")
    if not epsilon >= 0:
        raise ValueError(f"grpo: epsilon must be >= 0, got {epsilon!r}")
    lo, hi = _check_clip_range(clip_range)

    returns = trajectory_returns(step_rewards)
    adv = [0.0] * len(returns)
    for members in group_indices(group_ids).values():
        rs = [returns[i] for i in members]
        if len(rs) < 2:
            continue  # one-trajectory group → 0
        mean = math.fsum(rs) / len(rs)
        s = group_std(rs, mean, std)
        if s <= epsilon:
            continue  # no spread in the group → 0
        for i in members:
            a = returns[i] - mean
            adv[i] = a / (s + epsilon) if normalize_std else a
    adv = [min(max(a, lo), hi) for a in adv]
    return broadcast(adv, step_rewards)


def _check_clip_range(clip_range: tuple[float, float] | None) -> tuple[float, float]:
    if clip_range is None:
        return -math.inf, math.inf
    try:
        lo, hi = (float(x) for x in clip_range)
    except (TypeError, ValueError):
        raise ValueError(
            f"grpo: clip_range must be None or a pair (lo, hi), got {clip_range!r}"
        ) from None
    if not lo <= hi:
        raise ValueError(f"grpo: clip_range must have lo <= hi, got {clip_range!r}")
    return lo, hi
