"""SPADER's diversity-aware exploration reward: pay for gold entities a trajectory digs up,
more for the ones few of its peers found, less for every query spent.

    r_{i,t} = (1/|GT_i|) · [ Σ_{e ∈ new_{i,t}} (α + β·exp(−λ·(N(e) − 1)))  −  c·q_{i,t} ]

* new_{i,t}: gold entities that appear in trajectory i's tool output for the first time at step t;
* N(e): how many trajectories of i's group retrieved e at least once (so N(e) ≥ 1 for e ∈ new);
* q_{i,t}: queries issued at step t; c the per-query cost (see `query_cost` for its warm-up);
* |GT_i|: distinct gold entities of i's question. An empty gold list gives 0 and no cost.

Entities are compared as given: pass canonical ids (the QA environment records, per step, the
canonical names of the gold entities its tool output mentioned).
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from turncredit.credit.registry import group_indices


def query_cost(step: int, cost: float = 0.01, warmup: int = 100, ramp: int = 100) -> float:
    """c at training step `step` (0-based): 0 for the first `warmup` steps, then linear up to `cost`
    over the next `ramp` steps: c = cost · clip((step − warmup) / ramp, 0, 1)."""
    if ramp <= 0:
        return cost if step >= warmup else 0.0
    return cost * min(max((step - warmup) / ramp, 0.0), 1.0)


def diversity_rewards(
    group_ids: Sequence[Hashable],
    gold: Sequence[Sequence[Hashable]],
    retrieved: Sequence[Sequence[Sequence[Hashable]]],
    queries: Sequence[Sequence[int]],
    *,
    alpha: float = 1.0,
    beta: float = 4.0,
    lam: float = 1.0,
    cost: float = 0.01,
) -> list[list[float]]:
    """Per-step exploration rewards, a ragged list shaped like `retrieved` (see module docstring)."""
    n = len(group_ids)
    for name, seq in (("gold", gold), ("retrieved", retrieved), ("queries", queries)):
        if len(seq) != n:
            raise ValueError(f"diversity_rewards: {name} has {len(seq)} entries, expected one per "
                             f"trajectory ({n})")
    for i, (r, q) in enumerate(zip(retrieved, queries)):
        if len(r) != len(q):
            raise ValueError(f"diversity_rewards: trajectory {i} has {len(r)} steps in retrieved but "
                             f"{len(q)} in queries")
    gold_sets = [set(g) for g in gold]
    # first step at which each trajectory saw each gold entity
    first_seen: list[dict[Hashable, int]] = []
    for gs, steps in zip(gold_sets, retrieved):
        seen: dict[Hashable, int] = {}
        for t, ents in enumerate(steps):
            for e in ents:
                if e in gs and e not in seen:
                    seen[e] = t
        first_seen.append(seen)
    out = [[0.0] * len(r) for r in retrieved]
    for members in group_indices(group_ids).values():
        found_by: dict[Hashable, int] = {}
        for i in members:
            for e in first_seen[i]:
                found_by[e] = found_by.get(e, 0) + 1
        for i in members:
            if not gold_sets[i]:
                continue
            bonus = [0.0] * len(out[i])
            for e, t in first_seen[i].items():
                bonus[t] += alpha + beta * math.exp(-lam * (found_by[e] - 1))
            size = len(gold_sets[i])
            out[i] = [(b - cost * q) / size for b, q in zip(bonus, queries[i])]
    return out
