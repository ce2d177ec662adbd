"""`turncredit bench`: rollout and update throughput on a fixed workload, in the peers' terms.

The default config (`configs/bench-peer-workload.yaml`) is the workload of the peer harness in
`shared/peers/` (SmolLM2-135M fp32, 8 secrets × 4 rollouts, ≤ 8 turns, ≤ 24 tokens a turn, the
zero-cost oracle), so its numbers sit next to the naive loop's, TRL's and the hardware limit's.
Timing follows the harness: the wall clock of a whole group (rendering, tokenizing, generating,
oracle), median over the groups after a one-turn warm-up. Each group goes through the trainer's
own step (`Trainer.play`: rollout, reward shaping; `Trainer.learn`: credit, filter, the update,
the sampler refresh), so the numbers are what training does; the update (one optimizer step at
the peer workload) is timed separately from the rollout.
"""

from __future__ import annotations

import dataclasses
import platform
import resource
import statistics
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from turncredit.config import Config

__all__ = ["run_bench", "format_bench"]


def _fixed_tasks(env: Any, step: int) -> list | None:
    """The env's fixed tasks for a step if it has them (the peer workload does), else None: the
    trainer samples them as in training."""
    return env.step_tasks(step) if hasattr(env, "step_tasks") else None


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip() or None
    except OSError:
        commit = None
    return {"cpu": cpu, "threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "commit": commit,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def run_bench(cfg: Config, groups: int = 3, train: bool = True) -> dict[str, Any]:
    """Warm up, then time `groups` rollout groups (and one update after each when `train`)."""
    from turncredit.envs import make_env
    from turncredit.train.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix="turncredit-bench-") as run_dir:
        trainer = Trainer(cfg, run_dir)
        env = trainer.env
        warm_env = make_env(cfg.env.name, dataclasses.replace(env.options, max_turns=1))
        warm = trainer.play(0, _fixed_tasks(env, 0), warm_env)
        if train:
            trainer.learn(0, warm.episodes)
        runs = []
        for step in range(1, groups + 1):
            played = trainer.play(step, _fixed_tasks(env, step), env)
            episodes, rollout, dt = played.episodes, played.stats, played.seconds_rollout
            n = len(episodes)
            run = {
                "step": step, "episodes": n, "seconds": dt, "episodes_per_s": n / dt,
                "gen_tokens": rollout.tokens_generated, "gen_tokens_per_s": rollout.tokens_generated / dt,
                "prompt_tokens_appended": rollout.tokens_prompt, "prompt_tokens_prefilled": rollout.tokens_prefilled,
                "turns": rollout.turns, "successes": sum(ep.success for ep in episodes),
                "seconds_generate": rollout.seconds_generate, "seconds_env": rollout.seconds_env,
            }
            if train:
                learned = trainer.learn(step, episodes)
                update, seconds = learned.update, learned.seconds_update
                run.update(update_seconds=seconds, update_sequence_tokens=update.sequence_tokens,
                           update_action_tokens=update.tokens,
                           update_tokens_per_s=update.sequence_tokens / seconds,
                           optimizer_steps=update.optimizer_steps)
            runs.append(run)
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "step"}
    r, t = cfg.rollout, cfg.train
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "workload": {"model": cfg.model.name, "dtype": cfg.model.dtype, "env": cfg.env.name,
                     "env_options": dataclasses.asdict(env.options), "backend": r.backend, "sampler_dtype": r.dtype,
                     "max_new_tokens": r.max_new_tokens, "temperature": r.temperature, "top_p": r.top_p,
                     "group_size": r.group_size, "estimator": cfg.algo.estimator,
                     "train": {"lr": t.lr, "kl": t.kl, "ppo_epochs": t.ppo_epochs, "minibatches": t.minibatches,
                               "micro_batch_size": t.micro_batch_size, "bf16": t.bf16}},
        "warmup_seconds": warm.seconds_rollout,
        "runs": runs,
        "median": median,
        "peak_rss_mib": _peak_rss_mib(),
    }


def format_bench(res: dict[str, Any]) -> str:
    m = res["median"]
    lines = [
        f"{res['workload']['model']} {res['workload']['dtype']} on {res['machine']['cpu']} "
        f"({res['machine']['threads']} threads), backend {res['workload']['backend']}",
        f"rollout: {m['seconds']:.1f} s/group  {m['episodes_per_s']:.3f} episodes/s  "
        f"{m['gen_tokens_per_s']:.1f} generated tok/s  ({m['gen_tokens']:.0f} generated, "
        f"{m['prompt_tokens_prefilled']:.0f} prompt tokens prefilled)",
    ]
    if "update_seconds" in m:
        lines.append(f"update:  {m['update_seconds']:.1f} s/step  {m['update_tokens_per_s']:.0f} tok/s "
                     f"({m['update_sequence_tokens']:.0f} tokens, {m['update_action_tokens']:.0f} trained)")
    lines.append(f"peak memory: {res['peak_rss_mib']:.0f} MiB RSS")
    return "\n".join(lines)
