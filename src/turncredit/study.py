"""`turncredit study SPEC`: credit methods side by side at one budget, over seeds.

A study spec (YAML) names arms — each an experiment config plus overrides — the seeds, the
budget (overrides every arm gets and none may change: steps, tasks and group size) and the
overrides shared by all (e.g. the SFT checkpoint to start from):

    name: 20q-credit
    seeds: [0, 1]
    budget: [train.steps=4, rollout.tasks_per_step=2, rollout.group_size=4]
    common: [model.name=runs/20q-starpo/sft/checkpoint, eval.num_tasks=10, eval.k=2]
    arms:
      starpo: {config: configs/20q-starpo.yaml}
      gigpo: {config: configs/20q-starpo.yaml, overrides: [algo.estimator=gigpo]}

Each arm × seed trains into OUT/ARM/seed_S (a run directory like any other, so `report` and
`--resume` work on it), then is evaluated on the held-out split. A finished run (its
eval.json exists) is not run again, so an interrupted study picks up where it stopped. The
study writes OUT/results.json, OUT/table.md (final metric mean ± std over seeds, wall time)
and OUT/curves_<metric>.png (learning curves, mean over seeds with a min–max band).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from turncredit.config import Config, ConfigError, load_config
from turncredit.jsonl import iter_jsonl

CURVE_METRICS = ("success_rate", "reward_mean")


@dataclass
class Arm:
    name: str
    config: str
    overrides: list[str] = field(default_factory=list)


@dataclass
class StudySpec:
    name: str
    arms: list[Arm]
    seeds: list[int]
    budget: list[str] = field(default_factory=list)
    common: list[str] = field(default_factory=list)
    #: the evaluation result compared in the table (a key of `turncredit eval`'s results)
    metric: str = "mean_at_k"


def load_spec(path: str | Path) -> StudySpec:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study spec not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with name, seeds, arms")
    unknown = set(raw) - {"name", "arms", "seeds", "budget", "common", "metric"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}")
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, dict) or not arms_raw:
        raise ConfigError(f"{path}: arms: expected a mapping of arm name → {{config, overrides}}")
    arms = []
    for name, a in arms_raw.items():
        if not isinstance(a, dict) or "config" not in a or set(a) - {"config", "overrides"}:
            raise ConfigError(f"{path}: arms.{name}: expected {{config: PATH, overrides: [KEY=VALUE, ...]}}")
        arms.append(Arm(str(name), str(a["config"]), [str(x) for x in a.get("overrides") or []]))
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{path}: seeds: expected a list of integers")
    spec = StudySpec(str(raw.get("name") or path.stem), arms, seeds, [str(x) for x in raw.get("budget") or []],
                     [str(x) for x in raw.get("common") or []], str(raw.get("metric", "mean_at_k")))
    budget_keys = {b.split("=", 1)[0] for b in spec.budget}
    for arm in arms:
        clash = budget_keys & {o.split("=", 1)[0] for o in arm.overrides}
        if clash:
            raise ConfigError(f"{path}: arms.{arm.name} overrides the budget ({', '.join(sorted(clash))})")
    return spec


def arm_config(spec: StudySpec, arm: Arm, seed: int, extra: list[str]) -> Config:
    """The arm's config: its file, then common, the arm's own, the budget, the seed, the CLI's."""
    return load_config(arm.config, [*spec.common, *arm.overrides, *spec.budget, f"run.seed={seed}",
                                    f"run.name={arm.name}-seed{seed}", *extra])


def check_one_environment(configs: dict[str, Config]) -> None:
    envs = {name: c.env.name for name, c in configs.items()}
    if len(set(envs.values())) > 1:
        raise ConfigError(f"study: all arms must use one environment, got {envs}")


def run_arm(cfg: Config, run_dir: Path) -> dict[str, Any]:
    """Train, then evaluate the result on the held-out split; returns the eval results + time."""
    from turncredit.cli import _evaluate, _step_line
    from turncredit.train.trainer import Trainer

    t0 = time.perf_counter()
    trainer = Trainer(cfg, run_dir, overwrite=True)
    for m in trainer.train_iter():
        print("  " + _step_line(m), flush=True)
    t_train = time.perf_counter() - t0
    res, _ = _evaluate(cfg, str(run_dir / "checkpoint"), trainer.session)
    res["seconds_train"] = t_train
    res["seconds_total"] = time.perf_counter() - t0
    (run_dir / "eval.json").write_text(json.dumps(res, indent=2))
    return res


def run_study(spec: StudySpec, out: Path, extra: list[str] | None = None) -> dict[str, Any]:
    extra = extra or []
    configs = {f"{a.name}/seed_{s}": arm_config(spec, a, s, extra) for a in spec.arms for s in spec.seeds}
    check_one_environment(configs)  # every config is checked before the first run starts
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, dict[str, Any]]] = {a.name: {} for a in spec.arms}
    for arm in spec.arms:
        for seed in spec.seeds:
            run_dir = out / arm.name / f"seed_{seed}"
            done = run_dir / "eval.json"
            if done.is_file():
                print(f"[{arm.name} seed {seed}] done before, reusing {done}", flush=True)
                results[arm.name][seed] = json.loads(done.read_text())
                continue
            print(f"[{arm.name} seed {seed}] training into {run_dir}", flush=True)
            results[arm.name][seed] = run_arm(configs[f"{arm.name}/seed_{seed}"], run_dir)
    summary = summarise(spec, results)
    (out / "results.json").write_text(json.dumps({"spec": spec_dict(spec), "runs": results, "summary": summary}, indent=2))
    (out / "table.md").write_text(format_table(spec, summary))
    plot_curves(spec, out)
    return summary


def spec_dict(spec: StudySpec) -> dict[str, Any]:
    return {"name": spec.name, "seeds": spec.seeds, "budget": spec.budget, "common": spec.common, "metric": spec.metric,
            "arms": {a.name: {"config": a.config, "overrides": a.overrides} for a in spec.arms}}


def summarise(spec: StudySpec, results: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per arm: the metric's mean and population std over seeds, the per-seed values, mean time."""
    out = {}
    for arm, by_seed in results.items():
        values = [float(r[spec.metric]) for _, r in sorted(by_seed.items())]
        out[arm] = {
            "mean": statistics.fmean(values), "std": statistics.pstdev(values), "values": values,
            "pass_at_k": statistics.fmean(float(r.get("pass_at_k", 0.0)) for r in by_seed.values()),
            "seconds": statistics.fmean(float(r.get("seconds_total", 0.0)) for r in by_seed.values()),
        }
    return out


def format_table(spec: StudySpec, summary: dict[str, dict[str, Any]]) -> str:
    lines = [f"Study {spec.name}: {len(spec.seeds)} seeds ({', '.join(map(str, spec.seeds))}); budget: "
             f"{' '.join(spec.budget) or 'the configs own'}", "",
             f"| arm | {spec.metric} mean ± std | per seed | Pass@k (mean) | wall time per run |", "|---|---|---|---|---|"]
    for arm, s in summary.items():
        per_seed = ", ".join(f"{100 * v:.1f}" for v in s["values"])
        lines.append(f"| {arm} | {100 * s['mean']:.1f} ± {100 * s['std']:.1f} | {per_seed} | "
                     f"{100 * s['pass_at_k']:.1f} | {s['seconds'] / 60:.1f} min |")
    return "\n".join(lines) + "\n"


def read_curves(run_dir: Path, metric: str) -> list[float]:
    return [float(row.get(metric, float("nan"))) for _, row in iter_jsonl(run_dir / "metrics.jsonl", "metrics line")]


def plot_curves(spec: StudySpec, out: Path, metrics: tuple[str, ...] = CURVE_METRICS) -> list[Path]:
    """One PNG per metric: each arm's mean over seeds by step, with a min–max band."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ImportError("study plots need matplotlib (pip install matplotlib)") from None
    paths = []
    for metric in metrics:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
        for arm in spec.arms:
            runs = [read_curves(out / arm.name / f"seed_{s}", metric) for s in spec.seeds]
            steps = min(len(r) for r in runs)
            if steps == 0:
                continue
            cols = [[r[t] for r in runs] for t in range(steps)]
            x = list(range(1, steps + 1))
            ax.plot(x, [statistics.fmean(c) for c in cols], marker="o", label=arm.name)
            ax.fill_between(x, [min(c) for c in cols], [max(c) for c in cols], alpha=0.15)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step")
        ax.set_ylabel(metric)
        ax.set_title(f"{spec.name}: {metric} (mean over {len(spec.seeds)} seeds, min–max band)")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"curves_{metric}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
