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
`--resume` work on it), then is evaluated on the held-out split; the starting model is
evaluated once per distinct weights, into OUT/start/<fingerprint>/eval.json. Every evaluation
plays the identical games (one eval.seed for all), so runs are compared word by word: each
arm's Mean@k gets a 95 % interval over seeds and words, its gain over the start it trained from
and every difference between two arms a paired one (`turncredit.metrics.seed_word_bootstrap`).
Runs go seed-major and the table is rewritten after each. A finished run (its eval.json exists)
is not run again and an interrupted one resumes from its newest checkpoint (set
train.save_every in the budget), so a stopped study picks up where it stopped — in a later
session too, from an SFT start retrained by the same recipe. The study writes OUT/results.json,
OUT/table.md and OUT/curves_<metric>.png (learning curves, mean over seeds, min–max band).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from turncredit.config import Config, ConfigError, load_config
from turncredit.jsonl import iter_jsonl
from turncredit.metrics import paired_difference, seed_word_bootstrap

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
    """Every run plays the same game and is evaluated on the same held-out games."""
    envs = {name: c.env.name for name, c in configs.items()}
    if len(set(envs.values())) > 1:
        raise ConfigError(f"study: all arms must use one environment, got {envs}")
    first, ref = next(iter(configs.items()))
    for name, c in configs.items():
        for section in ("eval", "env"):
            if getattr(c, section) != getattr(ref, section):
                raise ConfigError(f"study: {name} and {first} differ in {section}.*; the runs must be evaluated on "
                                  f"identical games to be compared (set it in the spec's common overrides)")


def run_arm(cfg: Config, run_dir: Path, start_fingerprint: str) -> dict[str, Any]:
    """Train (resuming a run that was stopped), then evaluate the result on the held-out split;
    returns the eval results + time."""
    from turncredit.workflows import evaluate_model, step_line
    from turncredit.train.checkpoint import discard, step_checkpoints
    from turncredit.train.trainer import Trainer

    resume = (run_dir / "config.yaml").is_file()
    trainer = Trainer(cfg, run_dir, resume=resume, overwrite=not resume)
    if trainer.resumed_from is not None:
        print(f"  resumed from {trainer.resumed_from} (step {trainer.step_idx})", flush=True)
    for m in trainer.train_iter():
        print("  " + step_line(m), flush=True)
    res, _ = evaluate_model(cfg, str(run_dir / "checkpoint"), trainer.session)
    res["seconds_train"] = train_seconds(run_dir)
    res["seconds_total"] = res["seconds_train"] + res["seconds"]
    res["start_fingerprint"] = start_fingerprint  # the model it trained from (study.start_dir)
    (run_dir / "eval.json").write_text(json.dumps(res, indent=2))
    # an evaluated run is never resumed mid-way again: its step checkpoints (2 GB each for a 135M
    # model with Adam's moments) would fill the disk over a study; the final one stays
    for d in step_checkpoints(run_dir):
        discard(d)
    return res


def train_seconds(run_dir: Path) -> float:
    """Time in a run's training steps, from its metrics, so the steps done before a resume count."""
    keys = ("seconds_rollout", "seconds_update", "seconds_shaping")
    return sum(float(row.get(k, 0.0)) for _, row in iter_jsonl(run_dir / "metrics.jsonl", "metrics line") for k in keys)


def model_fingerprint(name: str) -> str:
    """What identifies the starting model: a digest of a local checkpoint's weight files (an SFT
    retrained in a later session has other weights, so it gets its own start evaluation), else
    the name itself (a hub id or a packaged model does not change under it)."""
    path = Path(name).expanduser()
    files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) if path.is_dir() else []
    if not files:
        return name
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()[:16]


def start_dir(out: Path, fingerprint: str) -> Path:
    return out / "start" / re.sub(r"[^A-Za-z0-9._-]+", "_", fingerprint.removeprefix("sha256:"))


def evaluate_start(cfg: Config, out: Path) -> dict[str, Any]:
    """The starting model on the held-out games, once per distinct model (OUT/start/<fingerprint>/).
    A study continued in a later session from an SFT retrained by the same recipe starts from other
    weights (floating point differs across machines and versions): that start is evaluated too,
    and each run is paired with the start it trained from."""
    from turncredit.workflows import evaluate_model

    fingerprint = model_fingerprint(cfg.model.name)
    path = start_dir(out, fingerprint) / "eval.json"
    done = _finished(path)
    if done is not None:
        print(f"[start] evaluated before, reusing {path}", flush=True)
        return done
    print(f"[start] evaluating {cfg.model.name} ({fingerprint})", flush=True)
    res, _ = evaluate_model(cfg, cfg.model.name)
    res["model_fingerprint"] = fingerprint
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=2))
    return res


def read_starts(out: Path, results: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The start evaluation of every fingerprint the finished runs name."""
    starts = {}
    for by_seed in results.values():
        for r in by_seed.values():
            fp = r["start_fingerprint"]
            if fp not in starts:
                path = start_dir(out, fp) / "eval.json"
                done = _finished(path)
                if done is None:
                    raise ConfigError(f"study: a run started from {fp}, but its evaluation {path} is missing")
                starts[fp] = done
    return starts


def _finished(eval_json: Path) -> dict[str, Any] | None:
    """A finished run's evaluation, or None; one written before evaluations kept per-word
    results cannot be paired, so that run is evaluated again (its training is reused)."""
    if not eval_json.is_file():
        return None
    res = json.loads(eval_json.read_text())
    return res if "per_task_success" in res else None


def run_study(spec: StudySpec, out: Path, extra: list[str] | None = None) -> dict[str, Any]:
    extra = extra or []
    configs = {f"{a.name}/seed_{s}": arm_config(spec, a, s, extra) for a in spec.arms for s in spec.seeds}
    check_one_environment(configs)  # every config is checked before the first run starts
    out.mkdir(parents=True, exist_ok=True)
    start = evaluate_start(next(iter(configs.values())), out)
    results: dict[str, dict[int, dict[str, Any]]] = {a.name: {} for a in spec.arms}
    for seed in spec.seeds:  # seed-major: a study stopped part-way has compared every arm on the first seeds
        for arm in spec.arms:
            run_dir = out / arm.name / f"seed_{seed}"
            done = _finished(run_dir / "eval.json")
            if done is not None:
                print(f"[{arm.name} seed {seed}] done before, reusing {run_dir / 'eval.json'}", flush=True)
            else:
                print(f"[{arm.name} seed {seed}] training into {run_dir}", flush=True)
                done = run_arm(configs[f"{arm.name}/seed_{seed}"], run_dir, start["model_fingerprint"])
            done.setdefault("start_fingerprint", start["model_fingerprint"])  # a run of a study older than fingerprints
            results[arm.name][seed] = done
            summary = write_results(spec, out, results, start)  # after every run, so a stop loses no table
    plot_curves(spec, out)
    return summary


def write_results(spec: StudySpec, out: Path, results: dict[str, dict[int, dict[str, Any]]],
                  start: dict[str, Any]) -> dict[str, Any]:
    """results.json and table.md over the runs finished so far (arms with none left out)."""
    finished = {arm: dict(sorted(by_seed.items())) for arm, by_seed in results.items() if by_seed}
    starts = read_starts(out, finished)
    summary = summarise(spec, finished, starts)
    total = len(spec.arms) * len(spec.seeds)
    summary["runs_finished"], summary["runs_total"] = sum(map(len, finished.values())), total
    (out / "results.json").write_text(json.dumps({"spec": spec_dict(spec), "start": start, "starts": starts,
                                                  "runs": finished, "summary": summary}, indent=2))
    (out / "table.md").write_text(format_table(spec, summary))
    return summary


def spec_dict(spec: StudySpec) -> dict[str, Any]:
    return {"name": spec.name, "seeds": spec.seeds, "budget": spec.budget, "common": spec.common, "metric": spec.metric,
            "arms": {a.name: {"config": a.config, "overrides": a.overrides} for a in spec.arms}}


def summarise(spec: StudySpec, results: dict[str, dict[int, dict[str, Any]]],
              starts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per arm: the metric over seeds (mean, population std, per seed), Mean@k's 95 % interval
    over seeds and words, the paired gain over the start, behaviour rates and time; then every
    pair of arms compared word by word. "significant" = the 95 % interval excludes 0."""
    arms: dict[str, Any] = {}
    per_task = {arm: [r["per_task_success"] for _, r in sorted(by_seed.items())] for arm, by_seed in results.items()}
    for arm, by_seed in results.items():
        runs = [r for _, r in sorted(by_seed.items())]
        values = [float(r[spec.metric]) for r in runs]
        tasks = sorted(per_task[arm][0])
        # each run against the start it trained from (one start unless the study spans SFT retrains)
        gain = paired_difference([starts[r["start_fingerprint"]]["per_task_success"] for r in runs], per_task[arm])
        arms[arm] = {
            "mean": statistics.fmean(values), "std": statistics.pstdev(values), "values": values,
            "interval": list(seed_word_bootstrap([[[p[t] for t in tasks] for p in per_task[arm]]], [1.0])),
            "gain": gain["difference"], "gain_interval": gain["interval"], "gain_significant": _excludes_zero(gain),
            "pass_at_k": statistics.fmean(float(r.get("pass_at_k", 0.0)) for r in runs),
            "repeated_rate": statistics.fmean(float(r.get("repeated_rate", 0.0)) for r in runs),
            "invalid_rate": statistics.fmean(float(r.get("invalid_rate", 0.0)) for r in runs),
            "seconds": statistics.fmean(float(r.get("seconds_total", 0.0)) for r in runs),
        }
    names = list(results)
    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            d = paired_difference(per_task[a], per_task[b])
            pairs[f"{b} − {a}"] = {"difference": d["difference"], "interval": d["interval"], "significant": _excludes_zero(d)}
    return {"starts": {fp: {"mean": st["mean_at_k"], "interval": st["mean_at_k_interval"],
                            "repeated_rate": st.get("repeated_rate", 0.0), "invalid_rate": st.get("invalid_rate", 0.0)}
                       for fp, st in starts.items()},
            "arms": arms, "pairs": pairs}


def _excludes_zero(d: dict[str, Any]) -> bool:
    lo, hi = d["interval"]
    return lo > 0 or hi < 0


def format_table(spec: StudySpec, summary: dict[str, Any]) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    span = lambda iv: f"[{100 * iv[0]:+.1f}, {100 * iv[1]:+.1f}]"  # noqa: E731
    lines = [f"Study {spec.name}: {len(spec.seeds)} seeds ({', '.join(map(str, spec.seeds))}); budget: "
             f"{' '.join(spec.budget) or 'the configs own'}", ""]
    done, total = summary.get("runs_finished"), summary.get("runs_total")
    if done is not None and done < total:
        lines += [f"**Partial: {done} of {total} runs finished** (run the study again to continue); an arm's "
                  "interval covers the seeds it has.", ""]
    starts = summary["starts"]
    for fp, st in starts.items():
        lines.append(f"Start (no RL){f' {fp}' if len(starts) > 1 else ''}: Mean@k {pct(st['mean'])} "
                     f"[{pct(st['interval'][0])}, {pct(st['interval'][1])}], repeated {pct(st['repeated_rate'])} %, "
                     f"invalid {pct(st['invalid_rate'])} %")
    if len(starts) > 1:
        lines.append("(the study spans SFT retrains of one recipe; each run's gain is over its own start)")
    lines += ["",
              f"| arm | {spec.metric} mean ± std over seeds | Mean@k 95 % interval (seeds × words) | Mean@k gain over "
              "start (paired 95 %) | per seed | Pass@k | repeated | invalid | wall time per run |",
              "|---|---|---|---|---|---|---|---|---|"]
    for arm, s in summary["arms"].items():
        per_seed = ", ".join(pct(v) for v in s["values"])
        star = " *" if s["gain_significant"] else ""
        lines.append(f"| {arm} | {pct(s['mean'])} ± {pct(s['std'])} | [{pct(s['interval'][0])}, {pct(s['interval'][1])}] | "
                     f"{100 * s['gain']:+.1f} {span(s['gain_interval'])}{star} | {per_seed} | {pct(s['pass_at_k'])} | "
                     f"{pct(s['repeated_rate'])} % | {pct(s['invalid_rate'])} % | {s['seconds'] / 60:.1f} min |")
    if summary["pairs"]:
        lines += ["", "| difference | Mean@k points | paired 95 % interval | significant |", "|---|---|---|---|"]
        for name, d in summary["pairs"].items():
            lines.append(f"| {name} | {100 * d['difference']:+.1f} | {span(d['interval'])} | {'yes' if d['significant'] else 'no'} |")
    lines += ["", "Intervals: percentile bootstrap, words resampled jointly (every run played the same held-out "
              "games), each arm's seeds resampled on their own; * = the interval excludes 0."]
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
