"""StarPO-S group filter: train only on the groups whose rewards disagree most.

A group whose rollouts all earned the same reward has zero advantage under group-relative
estimators, so it spends compute and adds no signal. The filter ranks groups by the in-group
std of the episodes' total reward and keeps the top ceil(keep_fraction × n_groups).
"""

from __future__ import annotations

import math
from typing import Hashable

from turncredit.credit.grpo import STD_KINDS, group_std
from turncredit.episode import Episode


def group_reward_std(episodes: list[Episode], std: str = "unbiased") -> dict[Hashable, float]:
    """group_id → std of `total_reward` over the group's non-aborted episodes.

    Unbiased (n−1) std by default, like `torch.std` in RAGEN's filter; std="population" divides
    by n. A group with fewer than two non-aborted episodes has std 0. Groups appear in
    first-appearance order.
    """
    if std not in STD_KINDS:
        raise ValueError(f"std must be one of {STD_KINDS}, got {std!r}")
    totals: dict[Hashable, list[float]] = {}
    for ep in episodes:
        bucket = totals.setdefault(ep.group_id, [])
        if not ep.aborted:
            bucket.append(ep.total_reward)
    out = {}
    for g, rs in totals.items():
        out[g] = group_std(rs, math.fsum(rs) / len(rs), std) if rs else 0.0
    return out


def variance_filter(
    episodes: list[Episode], keep_fraction: float, std: str = "unbiased"
) -> list[Episode]:
    """Episodes of the top ceil(keep_fraction × n_groups) groups by in-group reward std.

    Ties are broken by first appearance (the earlier group wins), so the result is
    deterministic; kept episodes come back in their original order. keep_fraction=1.0 keeps
    everything. Aborted episodes do not count in the std but stay with their group.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction!r}")
    stds = group_reward_std(episodes, std)
    n_keep = math.ceil(keep_fraction * len(stds))
    # `sorted` is stable and `stds` is in first-appearance order, so ties keep that order.
    ranked = sorted(stds, key=lambda g: -stds[g])
    kept = set(ranked[:n_keep])
    return [ep for ep in episodes if ep.group_id in kept]
