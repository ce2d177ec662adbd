"""Evaluation metrics: Mean@k ± std, unbiased Pass@k, and small helpers."""

from __future__ import annotations

import math
from typing import Any, Sequence


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """(mean, population std):  μ = Σx/n,  σ = sqrt(Σ(x − μ)²/n)."""
    if len(xs) == 0:
        raise ValueError("mean_std: xs is empty; expected at least one value")
    mu = math.fsum(xs) / len(xs)
    return mu, math.sqrt(math.fsum((x - mu) ** 2 for x in xs) / len(xs))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n samples of which c succeeded (Chen et al., 2021).

        pass@k = 1 − C(n − c, k) / C(n, k)        (= 1 when n − c < k)

    i.e. the chance that k samples drawn without replacement from the n contain a success.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"pass_at_k: n, c, k must be integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or k < 1:
        raise ValueError(f"pass_at_k: n and k must be >= 1, got n={n}, k={k}")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} is larger than the number of samples n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c must be in [0, n={n}], got c={c}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def success_summary(success_by_task: dict[str, list[bool]], k: int) -> dict[str, Any]:
    """Mean@k ± std and Pass@k over tasks, each with n ≥ k sampled attempts.

        mean_at_k     = mean over tasks τ and j < k of s_{τ,j}        (first k samples)
        mean_at_k_std = population std over j < k of  m_j = mean_τ s_{τ,j}
                        (how much the success rate of one run of the task set varies)
        pass_at_k     = mean over tasks of pass_at_k(n_τ, c_τ, k)     (all n_τ samples)
    """
    if not success_by_task:
        raise ValueError("success_summary: success_by_task is empty; expected at least one task")
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"success_summary: k must be an integer >= 1, got {k!r}")
    for task, runs in success_by_task.items():
        if len(runs) < k:
            raise ValueError(
                f"success_summary: task {task!r} has {len(runs)} samples, expected at least k={k}"
            )
    tasks = list(success_by_task.values())
    per_index = [math.fsum(bool(runs[j]) for runs in tasks) / len(tasks) for j in range(k)]
    mean, std = mean_std(per_index)
    passes = [pass_at_k(len(runs), sum(bool(s) for s in runs), k) for runs in tasks]
    return {
        "mean_at_k": mean,
        "mean_at_k_std": std,
        "pass_at_k": math.fsum(passes) / len(passes),
        "k": k,
        "n_tasks": len(tasks),
        "n_samples": sum(len(runs) for runs in tasks),
    }
