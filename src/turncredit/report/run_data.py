"""What a report shows, read from a run directory: metrics, evaluation results and episodes.

Episodes lose their token ids (`prompt_ids`, `action_ids`, `sampler_logprobs`): they are most
of an episode file's bytes and nothing a reader looks at. Large runs are capped evenly: the
first episodes of every step (and of every evaluation file), so late steps are not cut off.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from turncredit.jsonl import iter_jsonl

MAX_EPISODES = 2000
TOKEN_KEYS = ("prompt_ids", "action_ids", "sampler_logprobs")


def collect(run_dir: str | Path, max_episodes: int = MAX_EPISODES) -> dict[str, Any]:
    """Everything the page embeds, as plain JSON-ready data (non-finite floats become null)."""
    run = Path(run_dir).expanduser()
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    if not (run / "metrics.jsonl").is_file():
        hint = f"; a pipeline run keeps its training run in {run / 'rl'}" if (run / "rl" / "metrics.jsonl").is_file() else ""
        raise FileNotFoundError(f"{run} is not a training run directory: expected {run / 'metrics.jsonl'}{hint}")
    if max_episodes < 1:
        raise ValueError(f"max_episodes must be ≥ 1, got {max_episodes}")
    metrics = read_metrics(run / "metrics.jsonl")
    sources = episode_sources(run)
    episodes, total, note = read_capped(sources, max_episodes)
    config = run / "config.yaml"
    text = config.read_text(encoding="utf-8") if config.is_file() else None
    return _finite({
        "run": {"name": run_name(run), "path": str(run), "config": text,
                "facts": config_facts(config, text) if text is not None else {}},
        "metrics": metrics,
        "evals": read_evals(run),
        "sources": [label for label, _ in sources],
        "episodes": episodes,
        "episodes_total": total,
        "episodes_note": note,
    })


def run_name(run: Path) -> str:
    """The directory's name; a pipeline's training run (PIPELINE/rl) is named PIPELINE/rl."""
    run = run.resolve()
    return f"{run.parent.name}/{run.name}" if (run.parent / "summary.json").is_file() else run.name


FACTS = {"env": ("env", "name"), "estimator": ("algo", "estimator"), "model": ("model", "name")}


def config_facts(path: Path, text: str) -> dict[str, str]:
    """The few config values a reader wants first: which environment, estimator and model."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from None
    out = {}
    for fact, (section, key) in FACTS.items():
        part = cfg.get(section) if isinstance(cfg, dict) else None
        if isinstance(part, dict) and part.get(key) is not None:
            out[fact] = str(part[key])
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    rows = []
    for where, row in iter_jsonl(path, "metrics"):
        if not isinstance(row, dict) or not _is_number(row.get("step")):
            raise ValueError(f"{where}: expected a metrics object with a numeric 'step'")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no steps logged yet")
    return rows


def read_evals(run: Path) -> list[dict[str, Any]]:
    """Evaluation results (`turncredit eval --out` files, a pipeline's summary.json), labelled."""
    files = [run / "eval.json", *sorted((run / "eval").glob("*.json")), run / "summary.json", run.parent / "summary.json"]
    out = []
    for f in files:
        if not f.is_file():
            continue
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}:{e.lineno}: not valid JSON ({e.msg})") from None
        rows = doc.get("eval", {}) if f.name == "summary.json" and isinstance(doc, dict) else doc
        if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
            raise ValueError(f"{f}: expected {{label: evaluation result}} as written by turncredit eval or pipeline")
        out += [{"label": label, "source": str(f), "result": r} for label, r in rows.items()]
    return out


def episode_sources(run: Path) -> list[tuple[str, Path]]:
    """(label, file) for every step's episodes in step order, then evaluation episodes."""
    steps = []
    for f in (run / "episodes").glob("step_*.jsonl"):
        m = re.fullmatch(r"step_(\d+)\.jsonl", f.name)
        if m:
            steps.append((int(m.group(1)), f))
    out = [(f"step {n}", f) for n, f in sorted(steps)]
    eval_dirs = [run / "eval"] + ([run.parent / "eval"] if (run.parent / "summary.json").is_file() else [])
    for d in eval_dirs:
        out += [(f"eval: {f.stem.replace('_', ' ')}", f) for f in sorted(d.glob("*.jsonl"))]
    return out


def read_capped(sources: list[tuple[str, Path]], cap: int) -> tuple[list[dict[str, Any]], int, str]:
    """The first episodes of each source, an equal share of `cap` each (of `cap` evenly spread
    sources when there are more); how many episodes all sources hold; a note saying so."""
    total = sum(_count_lines(path) for _, path in sources)
    spread = len(sources) > cap
    if spread:
        sources = [sources[round(i * (len(sources) - 1) / max(1, cap - 1))] for i in range(cap)]
    quota = max(1, cap // len(sources)) if sources else 0
    episodes: list[dict[str, Any]] = []
    for label, path in sources:
        for i, (where, d) in enumerate(iter_jsonl(path, "episode")):
            if i == quota:
                break
            episodes.append(slim_episode(d, where, label))
    if len(episodes) == total:
        return episodes, total, f"{total} episodes from {len(sources)} files; token ids are left out."
    which = f"{cap} evenly spread step and evaluation files" if spread else "each step and evaluation file"
    return episodes, total, (f"Showing {len(episodes)} of {total} episodes: the first {quota} of {which} "
                             "(turncredit report --max-episodes N shows more); token ids are left out.")


def _count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def slim_episode(d: Any, where: str, source: str) -> dict[str, Any]:
    """The episode without token ids, plus what the browser filters and sorts on."""
    if not isinstance(d, dict) or not isinstance(d.get("turns", []), list):
        raise ValueError(f"{where}: expected an Episode object with a 'turns' list")
    turns = []
    for t in d.get("turns", []):
        if not isinstance(t, dict):
            raise ValueError(f"{where}: expected every turn to be an object")
        slim = {k: v for k, v in t.items() if k not in TOKEN_KEYS}
        slim["tokens"] = len(t.get("action_ids") or [])
        turns.append(slim)
    task = d.get("task") if isinstance(d.get("task"), dict) else {}
    aborted, success = bool(d.get("aborted")), bool(d.get("success"))
    return {**{k: v for k, v in d.items() if k != "turns"}, "turns": turns, "source": source,
            "where": where, "task_id": str(task.get("task_id", "")),
            "result": "aborted" if aborted else "won" if success else "lost",
            "return": sum(t["reward"] for t in turns if _is_number(t.get("reward")))}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _finite(x: Any) -> Any:
    """NaN and ±inf (a diverged loss) as null: JSON.parse rejects them."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x
