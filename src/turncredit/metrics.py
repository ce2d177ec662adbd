"""Evaluation metrics: Mean@k ± std, unbiased Pass@k, and small helpers."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


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


def per_task_success(success_by_task: dict[str, list[bool]], k: int) -> dict[str, float]:
    """Each task's success rate over its first k samples: the unit that is resampled below."""
    return {task: math.fsum(bool(s) for s in runs[:k]) / k for task, runs in success_by_task.items()}


def _percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(stats, [tail, 1.0 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def seed_word_bootstrap(
    tables: Sequence[Sequence[Sequence[float]]], weights: Sequence[float],
    level: float = 0.95, resamples: int = 10_000, seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval for Σ_a w_a · mean(T_a), each table T_a a [seeds × words]
    grid of per-word success rates over the same words in the same order.

    Per draw b, one multiset of words I_b ~ Uniform{1..W}^W is shared by every table (the tables
    are paired by word, so word difficulty cancels in a difference) and each table's seeds
    J_ab ~ Uniform{1..S_a}^S_a are drawn on their own (runs of different arms are independent):

        θ*_b = Σ_a w_a · (1 / (S_a W)) Σ_s Σ_w T_a[J_ab,s , I_b,w]
        interval = [q_{(1−level)/2}(θ*), q_{(1+level)/2}(θ*)]      (inverted-CDF quantiles)

    A single model's Mean@k is one table of one row with weight 1; after − before is
    weights (−1, +1).
    """
    if not 0 < level < 1:
        raise ValueError(f"bootstrap: level must be in (0, 1), got {level}")
    arrays = [np.asarray(t, dtype=np.float64) for t in tables]
    if not arrays or len(arrays) != len(weights):
        raise ValueError("bootstrap: expected one weight per table and at least one table")
    if any(a.ndim != 2 or a.size == 0 for a in arrays):
        raise ValueError("bootstrap: expected non-empty [seeds × words] tables")
    words = arrays[0].shape[1]
    if any(a.shape[1] != words for a in arrays):
        raise ValueError(f"bootstrap: the tables cover different numbers of words ({[a.shape[1] for a in arrays]})")
    rng = np.random.default_rng(seed)
    picked_words = rng.integers(0, words, size=(resamples, words))
    theta = np.zeros(resamples)
    for a, w in zip(arrays, weights):
        seeds = rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))
        per_word = a[seeds].mean(axis=1)  # [resamples × words]: this draw's seeds, averaged
        theta += w * np.take_along_axis(per_word, picked_words, axis=1).mean(axis=1)
    return _percentile_interval(theta, level)


def bootstrap_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of per-task values, tasks resampled with
    replacement (the k samples of one word are not independent of each other):
    `seed_word_bootstrap` with one table of one row."""
    if len(values) == 0:
        raise ValueError("bootstrap_interval: expected a non-empty list of per-task values")
    return seed_word_bootstrap([[list(values)]], [1.0], level, resamples, seed)


PerTask = dict[str, float]


def paired_difference(
    before: PerTask | Sequence[PerTask], after: PerTask | Sequence[PerTask],
    level: float = 0.95, resamples: int = 10_000, seed: int = 0,
) -> dict[str, Any]:
    """mean(after) − mean(before) over the same tasks, each side one evaluation's per-task
    success rates or a list of them (one per training seed), with the paired interval of
    `seed_word_bootstrap` (words shared by both sides, seeds drawn per side). With one
    evaluation a side this is the bootstrap of the per-word differences d_w = after_w − before_w."""
    sides = [[before] if isinstance(before, dict) else list(before), [after] if isinstance(after, dict) else list(after)]
    tasks = sorted(sides[0][0])
    for side in sides:
        for run in side:
            if set(run) != set(tasks):
                only = sorted(set(run) ^ set(tasks))[:5]
                raise ValueError(f"paired_difference: the evaluations cover different tasks (e.g. {', '.join(only)}); "
                                 "evaluate all of them on the same split, num_tasks and seed")
    tables = [[[run[t] for t in tasks] for run in side] for side in sides]
    means = [np.mean(t) for t in tables]
    lo, hi = seed_word_bootstrap(tables, [-1.0, 1.0], level, resamples, seed)
    return {"difference": float(means[1] - means[0]), "interval": [lo, hi], "level": level, "n_tasks": len(tasks),
            "n_runs": [len(side) for side in sides]}
