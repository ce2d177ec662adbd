"""Held-out evaluation: k sampled games per task, summarised as Mean@k ± std and Pass@k."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from turncredit.envs.base import MultiTurnEnv, Task
from turncredit.episode import Episode
from turncredit.metrics import bootstrap_interval, paired_difference, per_task_success, success_summary
from turncredit.rollout import RolloutStats, SamplingParams, run_episodes


def eval_tasks(env: MultiTurnEnv, split: str, num_tasks: int) -> list[Task]:
    tasks = env.tasks(split)
    return tasks[:num_tasks] if num_tasks else tasks


def summarize(episodes: Sequence[Episode], k: int, env: MultiTurnEnv) -> dict[str, Any]:
    """Success metrics over tasks (Mean@k, Pass@k) and the per-turn behaviour rates `env`
    reports (`MultiTurnEnv.label_rates`: 20 Questions' repeated_rate and invalid_rate)."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for ep in episodes:
        by_task[ep.task.task_id].append(bool(ep.success) and not ep.aborted)
    out = success_summary(dict(by_task), k)
    per_task = per_task_success(dict(by_task), k)
    out["mean_at_k_interval"] = list(bootstrap_interval(list(per_task.values())))  # 95 %, words resampled
    out["per_task_success"] = per_task  # what a paired comparison of two evaluations resamples
    wins = [ep.num_turns for ep in episodes if ep.success]
    out.update(
        avg_questions=statistics.fmean(ep.num_turns for ep in episodes) if episodes else 0.0,
        avg_questions_when_won=statistics.fmean(wins) if wins else None,
        **env.label_rates(episodes),
        aborted=sum(ep.aborted for ep in episodes),
        episodes=len(episodes),
    )
    return out


def evaluate_policy(
    session: Any,
    env: MultiTurnEnv,
    tasks: Sequence[Task],
    k: int,
    params: SamplingParams,
    seed: int = 0,
    batch_size: int = 64,
    refill: bool = True,
) -> tuple[dict[str, Any], list[Episode]]:
    """Play k games per task with the policy; every sample of a task sees the same task instance."""
    rep = [t for t in tasks for _ in range(k)]
    gids = [t.task_id for t in rep]
    stats = RolloutStats()
    eps = run_episodes(env, session.backend, session.bridge, rep, gids, params, seed=seed,
                       batch_size=batch_size, stats=stats, refill=refill)
    res = summarize(eps, k, env)
    res.update(env.summarize(eps))
    res.update(tokens_generated=stats.tokens_generated, seconds_generate=stats.seconds_generate)
    return res, eps


def evaluate_player(
    play: Callable[[MultiTurnEnv, Task, Any], Episode],
    env: MultiTurnEnv,
    tasks: Sequence[Task],
    seed: int = 0,
) -> tuple[dict[str, Any], list[Episode]]:
    """Evaluate a scripted player (e.g. the expert questioner): one deterministic game per task."""
    from turncredit.rollout import task_rng

    eps = []
    for t in tasks:
        ep = play(env, t, task_rng(seed, t))
        ep.group_id = t.task_id
        eps.append(ep)
    return summarize(eps, 1, env), eps


#: the label of the scripted expert's row in evaluation tables and files
EXPERT_ROW = "expert (ceiling)"


def read_model_evaluation(path: str | Path) -> dict[str, Any]:
    """The evaluated model's result in a `turncredit eval --out` file ({label: result}; the
    expert's ceiling row, which `--expert` adds, is not a model)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"evaluation file not found: {p}")
    try:
        rows = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e.msg})") from None
    models = {k: v for k, v in rows.items() if k != EXPERT_ROW and isinstance(v, dict) and "per_task_success" in v} \
        if isinstance(rows, dict) else {}
    if len(models) != 1:
        raise ValueError(f"{p}: expected one model's evaluation with per_task_success (as written by "
                         f"turncredit eval --out), found {len(models)}: {', '.join(models) or 'none'}")
    return next(iter(models.values()))


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """How `after` differs from `before` on the identical held-out games: Mean@k difference with
    its paired 95 % interval (bootstrap over tasks), and the behaviour rates side by side."""
    if before["k"] != after["k"]:
        raise ValueError(f"compare: the evaluations used different k ({before['k']} and {after['k']})")
    out = paired_difference(before["per_task_success"], after["per_task_success"])
    for key in ("repeated_rate", "invalid_rate", "avg_questions"):
        if key in before and key in after:  # an environment reports the rates of its own labels only
            out[key] = [before[key], after[key]]
    return out


def format_comparison(label: str, c: dict[str, Any], k: int) -> str:
    lo, hi = c["interval"]
    rates = [f"{name} {100 * c[key][0]:.1f}% → {100 * c[key][1]:.1f}%"
             for key, name in (("repeated_rate", "repeated"), ("invalid_rate", "invalid")) if key in c]
    line = (f"[{label}] Mean@{k} {100 * c['difference']:+.1f} points, paired {100 * c['level']:.0f}% interval "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}] over {c['n_tasks']} words")
    return line + (f"; {', '.join(rates)}" if rates else "")


def format_table(rows: dict[str, dict[str, Any]], k: int) -> str:
    """A plain-text table, one row per evaluated model."""
    head = (f"{'model':<28} {'Mean@' + str(k):>14} {'95% interval':>14} {'Pass@' + str(k):>8} {'questions':>9}"
            f" {'repeat':>7} {'invalid':>7}")
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        mean = f"{100 * r['mean_at_k']:.1f} ± {100 * r['mean_at_k_std']:.1f}"
        lo, hi = r.get("mean_at_k_interval", (math.nan, math.nan))
        lines.append(
            f"{name:<28} {mean:>14} {f'[{100 * lo:.1f}, {100 * hi:.1f}]':>14} {100 * r['pass_at_k']:>7.1f}%"
            f" {r['avg_questions']:>9.2f} {_rate(r.get('repeated_rate'))} {_rate(r.get('invalid_rate'))}"
        )
    extra = [c for c in ANSWER_SET_COLUMNS if any(c in r for r in rows.values())]
    if extra:  # an answer-set environment: its own scores under the success table
        head = f"{'model':<28} " + " ".join(f"{c:>15}" for c in extra)
        lines += ["", head, "-" * len(head)]
        lines += [f"{name:<28} " + " ".join(f"{r.get(c, float('nan')):>15.3f}" for c in extra) for name, r in rows.items()]
    return "\n".join(lines)


def _rate(x: float | None) -> str:
    """A table cell of a behaviour rate; a dash where the environment reports none."""
    return f"{'—':>7}" if x is None else f"{100 * x:>6.1f}%"


ANSWER_SET_COLUMNS = ("f1", "precision", "recall", "exact_match", "evidence_recall", "tool_calls", "format_error_rate")
