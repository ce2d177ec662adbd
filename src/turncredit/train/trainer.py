"""The RL loop: sample tasks → roll out groups → credit → filter → PPO-clip update → log.

Each stage reads and writes `Episode`s; the trainer only wires them together.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator


from turncredit.config import (
    RESUMABLE_CHANGES, Config, ConfigError, config_differences, env_from_config, load_config, save_config,
)
from turncredit.credit import assign_advantages
from turncredit.rewards import SHAPERS, shaper_needs
from turncredit.credit.filters import group_reward_std, variance_filter
from turncredit.episode import Episode, write_episodes
from turncredit.guidance import check_can_take_over, guided_members
from turncredit.loggers import make_loggers
from turncredit.progress import Progress
from turncredit.rollout import RolloutStats, SamplingParams, resolve_refill, run_episodes
from turncredit.policy.session import PolicySession
from turncredit.precision import choose_precision
from turncredit.train.checkpoint import (
    FINAL_DIR, CheckpointError, clean_leftovers, discard, keep_steps_up_to, latest_checkpoint, load_checkpoint, prune,
    step_dir_name, write_checkpoint,
)
from turncredit.memory import peak_rss_gb, release_freed, rss_gb
from turncredit.train.distributed import PARALLEL, resident_mib
from turncredit.policy.scoring import model_device
from turncredit.train.forward import enable_activation_checkpointing, train_top_layers
from turncredit.train.optim import adamw
from turncredit.train.schedule import warmup_steps
from turncredit.train.update import PPOUpdate, UpdateStats

log = logging.getLogger(__name__)


@dataclass
class Played:
    """A step's rollout: every rank's episodes in task order, their rewards already shaped."""

    episodes: list[Episode]
    stats: RolloutStats
    env_counts: dict[str, int]  # the environment's counters' increase over the rollout, all ranks
    seconds_rollout: float
    seconds_shaping: float  # the slowest rank's


@dataclass
class Learned:
    """What a step learned from its episodes: those it trained on and the update's stats."""

    trainable: list[Episode]  # every rank's, after the filter
    update: UpdateStats
    seconds_update: float  # the update and the sampler refresh
    seconds_sampler_refresh: float


def group_id(step: int, j: int) -> str:
    """The id of task group j of a step (the same on every rank)."""
    return f"s{step}-g{j}"


def check_applicable(cfg: Config, env: Any) -> None:
    """A reward shaper that needs task fields this environment lacks is a config error now,
    not a crash (or silent zeros) after the first rollout."""
    if cfg.algo.expert_guidance:
        try:
            play = env.expert(**cfg.algo.guidance_expert_options)
        except (TypeError, ValueError) as e:  # an unknown or out-of-range option of the expert
            raise ConfigError(f"algo.guidance_expert_options: {e}") from None
        try:
            check_can_take_over(play, env, "algo.expert_guidance")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    need = shaper_needs(cfg.algo.reward_shaper).task_fields
    tasks = env.tasks("train") if need else []
    missing = [f for f in need if tasks and f not in tasks[0].data]
    if missing:
        raise ConfigError(f"algo.reward_shaper: {cfg.algo.reward_shaper!r} needs tasks with {', '.join(map(repr, missing))}; "
                          f"environment {cfg.env.name!r} has none (its task fields: {', '.join(sorted(tasks[0].data))})")


class Trainer(PPOUpdate):
    """Runs `train.steps` steps into `run_dir`; with `resume=True` it continues from the run's
    newest complete checkpoint exactly as if it had never stopped."""

    def __init__(
        self, cfg: Config, run_dir: str | Path | None = None, session: PolicySession | None = None,
        resume: bool = False, overwrite: bool = False,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir or Path(cfg.run.out_dir) / cfg.run.name)
        self.dist = PARALLEL.get(cfg.train.parallel)()  # the ranks of an `accelerate launch`, or this process alone
        resume_from = self._resume_point() if resume else self._fresh_start(overwrite)
        self.session = session or PolicySession.from_config(cfg)
        precision = choose_precision(cfg.train.bf16, model_device(self.session.model))
        self.bf16 = precision.bf16
        #: what the "auto" settings became on this machine, and why (config.yaml, metrics, log)
        sampler = self.session.sampler_dtype
        self.precision_note = (f"precision: {precision.note('update')}; "
                               f"sampling from {'the trained weights' if sampler == 'model' else f'a {sampler} copy'}")
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.run_dir / "config.yaml",
                        resolved={"bf16_update": self.bf16, "sampler_dtype": sampler, "probe": precision.probe.to_dict()})
        self.env = env_from_config(cfg)
        check_applicable(cfg, self.env)
        self.model = self.session.model
        train = cfg.train
        # the KL reference is the starting policy (cfg.model.name), also when resuming: LoRA
        # switches its adapter off, full fine-tuning keeps a frozen copy (made before sharding)
        frozen = None
        if train.kl != "none" and not hasattr(self.model, "disable_adapter"):
            frozen = copy.deepcopy(self.model).eval().requires_grad_(False)
        train_top_layers(self.model, train.trainable_layers)
        if train.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        self.scorer = self.dist.wrap(self.model)  # what the update runs forward through
        self.ref_scorer = self.dist.wrap(frozen) if frozen is not None else None
        self.params = [p for p in self.scorer.parameters() if p.requires_grad]
        self.optimizer = adamw(self.params, lr=train.lr, betas=tuple(train.betas), weight_decay=train.weight_decay)
        self.warmup_steps = warmup_steps(train.lr_warmup_steps, train.lr_warmup_ratio,
                                         train.steps * train.ppo_epochs * train.minibatches)
        self.step_idx = 0
        if resume_from is not None:
            self.step_idx = load_checkpoint(resume_from, self.model, self.optimizer)
            self._refresh_sampler()
        if self.dist.is_main:
            keep_steps_up_to(self.run_dir, self.step_idx)  # a fresh run starts a fresh log
        self.dist.barrier()
        self.resumed_from = resume_from
        self.progress = Progress(cfg.run.progress if self.dist.is_main else "never")
        try:
            names = cfg.run.loggers if self.dist.is_main else []
            self.loggers = make_loggers(names, cfg.run.logger_options, self.run_dir, cfg.to_dict())
        except ImportError as e:
            raise ConfigError(str(e)) from None

    def _fresh_start(self, overwrite: bool) -> None:
        """A new run never mixes with an old one's checkpoints: refuse, or delete them if asked."""
        old = sorted(d.name for d in self.run_dir.glob("checkpoint*") if d.is_dir()) if self.run_dir.is_dir() else []
        if old and not overwrite:
            raise ConfigError(f"run directory {self.run_dir} already holds {', '.join(old[:3])}: --resume continues "
                              "that run, --overwrite starts it again, or choose another run.name / --run-dir")
        if self.dist.is_main:
            for name in old:
                discard(self.run_dir / name)
        self.dist.barrier()
        return None

    def _resume_point(self) -> Path | None:
        """The checkpoint to continue from, after checking the config matches the run's own."""
        saved = self.run_dir / "config.yaml"
        if not saved.is_file():
            raise CheckpointError(f"--resume: {self.run_dir} is not a run directory (no config.yaml)")
        changed = [k for k in config_differences(load_config(saved), self.cfg) if k not in RESUMABLE_CHANGES]
        if changed:
            raise ConfigError(f"--resume: the config differs from {saved} at {', '.join(changed)}; "
                              f"resume with that file (only {', '.join(RESUMABLE_CHANGES[:3])} may change)")
        if self.dist.is_main:
            clean_leftovers(self.run_dir)
        self.dist.barrier()
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            log.warning("resume: no complete checkpoint in %s yet; starting from step 0", self.run_dir)
        return ckpt

    # ------------------------------------------------------------------ one step

    def sample_groups(self, step: int) -> tuple[list, list[str]]:
        """The step's sampled tasks, each `group_size` times, and their group ids."""
        rng = random.Random(self.cfg.run.seed * 1_000_003 + step)
        return self._as_groups(step, self.env.sample_tasks("train", self.cfg.rollout.tasks_per_step, rng))

    def _as_groups(self, step: int, tasks: list) -> tuple[list, list[str]]:
        g = self.cfg.rollout.group_size
        return [t for t in tasks for _ in range(g)], [group_id(step, j) for j in range(len(tasks)) for _ in range(g)]

    def _play_own_groups(self, step: int, tasks: list | None = None, env: Any = None
                         ) -> tuple[list[int], list[Episode], RolloutStats]:
        r = self.cfg.rollout
        env = self.env if env is None else env
        tasks, gids = self.sample_groups(step) if tasks is None else self._as_groups(step, tasks)
        my_groups = set(self.dist.my_groups(r.tasks_per_step))
        mine = [i for i in range(len(tasks)) if i // r.group_size in my_groups]
        stats = RolloutStats()
        with self.progress.phase(f"step {step}/{self.cfg.train.steps} rollout", len(mine), "episode") as bar:
            eps = run_episodes(
                env, self.session.backend, self.session.bridge, [tasks[i] for i in mine], [gids[i] for i in mine],
                SamplingParams.of(r),
                seed=self._rollout_seed(step), batch_size=r.batch_size, stats=stats,
                on_finished=bar.update, refill=resolve_refill(r.continuous_batching, self.session.device),
            )
        return mine, eps, stats

    def _rollout_seed(self, step: int) -> int:
        return self.cfg.run.seed * 1_000_003 + step

    def _add_guided(self, step: int, n_groups: int, mine: list[int], own: list[Episode], env: Any
                    ) -> tuple[list[int], list[Episode]]:
        """`algo.expert_guidance` members for this rank's groups, indexed after every rank's
        policy episodes (group j's s-th at n + j·m + s), so sharing keeps one order everywhere."""
        m = self.cfg.algo.expert_guidance
        guided = guided_members(env, self.session.bridge, own, m, random.Random(self._rollout_seed(step) * 31 + 7),
                                self._rollout_seed(step), self.cfg.algo.guidance_expert_options)
        n = n_groups * self.cfg.rollout.group_size
        slot = {group_id(step, j): n + j * m for j in range(n_groups)}
        index = []
        for ep in guided:
            index.append(slot[ep.group_id])
            slot[ep.group_id] += 1
        return mine + index, own + guided

    def _share(self, mine: list[int], eps: list[Episode], stats: RolloutStats) -> tuple[list[Episode], RolloutStats]:
        """Every rank's episodes, in task order, on every rank."""
        if not self.dist.enabled:
            return eps, stats
        shared = self.dist.gather((mine, eps, stats))
        by_index = {i: ep for idx, part, _ in shared for i, ep in zip(idx, part)}
        total = RolloutStats()
        for _, _, rank_stats in shared:  # counts add up; seconds are the slowest rank's
            for k, v in vars(rank_stats).items():
                setattr(total, k, max(getattr(total, k), v) if k.startswith("seconds") else getattr(total, k) + v)
        return [by_index[i] for i in sorted(by_index)], total

    def train_step(self) -> dict[str, Any]:
        """One step: play (roll out, shape rewards) → learn (credit, filter, update) → log → checkpoint."""
        step = self.step_idx + 1
        played = self.play(step)
        learned = self.learn(step, played.episodes)
        self.step_idx = step

        metrics = {**self._metrics(step, played.episodes, learned.trainable, played.stats, learned.update,
                                   played.seconds_rollout, learned.seconds_update),
                   **played.env_counts, "seconds_shaping": played.seconds_shaping,
                   "seconds_sampler_refresh": learned.seconds_sampler_refresh,
                   "rss_gb": rss_gb(), "peak_rss_gb": round(peak_rss_gb(), 2)}
        # episodes, then the metrics line, then the checkpoint: a step is complete once its
        # checkpoint exists, and a resume redoes (and rewrites) any step after the last one
        if self.dist.is_main:
            self._write_step(step, played.episodes, metrics)
        train = self.cfg.train
        if train.save_every and step % train.save_every == 0 and step < train.steps:
            self.save(step_dir_name(step))
            if self.dist.is_main:
                prune(self.run_dir, train.keep_last)
        return metrics

    def play(self, step: int, tasks: list | None = None, env: Any = None) -> Played:
        """Roll out the step's groups (each rank its own, then shared) and shape their rewards.
        `tasks` (one per group) and `env` replace the sampled tasks and `self.env`: `turncredit
        bench` plays a fixed workload through this same path."""
        t0 = time.perf_counter()
        env = self.env if env is None else env
        counted = env.counters()
        algo = self.cfg.algo
        shaper = SHAPERS.get(algo.reward_shaper)
        with self.dist.full_weights(self.scorer):  # generation and shaping read whole weights
            mine, own, rollout_stats = self._play_own_groups(step, tasks, env)
            if algo.expert_guidance:
                n_groups = self.cfg.rollout.tasks_per_step if tasks is None else len(tasks)
                mine, own = self._add_guided(step, n_groups, mine, own, env)
            seconds_rollout = time.perf_counter() - t0
            # shapers are group-local and a group never spans ranks: each rank shapes its own
            t_shape = time.perf_counter()
            policy = {"policy": self.session} if shaper_needs(algo.reward_shaper).policy else {}
            shaper(own, step, **policy, **algo.shaper_options)
            seconds_shaping = self.dist.gather(time.perf_counter() - t_shape)
        episodes, rollout_stats = self._share(mine, own, rollout_stats)
        env_counts = {k: v - counted.get(k, 0) for k, v in env.counters().items()}
        env_counts = dict(zip(env_counts, (int(x) for x in self.dist.sum_floats(list(env_counts.values())))))
        release_freed()  # the rollout's KV caches go back before the update's activations come
        return Played(episodes, rollout_stats, env_counts, seconds_rollout, max(seconds_shaping))

    def learn(self, step: int, episodes: list[Episode]) -> Learned:
        """What a step does with its played episodes: credit → filter → PPO update (each rank on
        its own groups) → refresh the sampler's weights."""
        algo = self.cfg.algo
        assign_advantages(episodes, algo.estimator, **algo.estimator_options)
        kept = variance_filter(episodes, algo.keep_group_fraction)
        trainable = [ep for ep in kept if not ep.aborted and ep.turns]
        my_gids = {group_id(step, j) for j in self.dist.my_groups(self.cfg.rollout.tasks_per_step)}
        local = [ep for ep in trainable if ep.group_id in my_gids] if self.dist.enabled else trainable

        t0 = time.perf_counter()
        with self.progress.phase(f"step {step}/{self.cfg.train.steps} update", self._num_micro_steps(local), "micro-batch") as bar:
            stats = self.update(local, on_micro_batch=bar.update)
        t_refresh = time.perf_counter()
        if stats.optimizer_steps:
            self._refresh_sampler()
        seconds_refresh = time.perf_counter() - t_refresh
        seconds_update = time.perf_counter() - t0
        release_freed()  # and the update's go back before the next rollout
        return Learned(trainable, stats, seconds_update=seconds_update, seconds_sampler_refresh=seconds_refresh)

    def _refresh_sampler(self) -> None:
        """Copy new weights to what samples (gathering shards only when there is such a copy)."""
        if self.session.samples_from_a_copy:
            with self.dist.full_weights(self.scorer):
                self.session.after_update()

    def _write_step(self, step: int, episodes: list[Episode], metrics: dict[str, Any]) -> None:
        write_episodes(self.run_dir / "episodes" / f"step_{step:05d}.jsonl", episodes)
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(metrics) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for sink in self.loggers:
            sink.log(metrics, step)
        self.progress.step_done(metrics)

    def train_iter(self) -> Iterator[dict[str, Any]]:
        """Run the configured steps, yielding each step's metrics; saves the final checkpoint."""
        try:
            while self.step_idx < self.cfg.train.steps:
                yield self.train_step()
            self.save(FINAL_DIR)
        finally:
            for sink in self.loggers:
                sink.close()

    def train(self) -> list[dict[str, Any]]:
        return list(self.train_iter())

    def save(self, name: str) -> Path:
        """A resumable checkpoint `run_dir/name` of the current step, written atomically by rank 0
        (every rank takes part in gathering sharded weights and optimizer state)."""
        with self.dist.full_weights(self.scorer):
            write_checkpoint(self.run_dir, name, self.session, self.optimizer, self.step_idx,
                             extra={"run": self.cfg.run.name}, write=self.dist.is_main)
        self.dist.barrier()
        return self.run_dir / name

    # ------------------------------------------------------------------ metrics

    def _metrics(self, step, episodes, trainable, rstats, ustats, t_rollout, t_update) -> dict[str, Any]:
        guided = [ep for ep in episodes if ep.expert_from is not None]
        episodes = [ep for ep in episodes if ep.expert_from is None]  # how the policy played
        rewards = [ep.total_reward for ep in episodes]
        stds = list(group_reward_std(episodes).values())
        return {
            "step": step,
            **({"guided_episodes": len(guided), "guided_success_rate": statistics.fmean(float(ep.success) for ep in guided),
                "guided_expert_turns": sum(ep.num_turns - ep.expert_from for ep in guided)} if guided else {}),
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.pstdev(rewards),
            "success_rate": statistics.fmean(float(ep.success) for ep in episodes),
            "group_reward_std": statistics.fmean(stds) if stds else 0.0,
            "episodes": len(episodes),
            "episodes_trained": len(trainable),
            "aborted": sum(ep.aborted for ep in episodes),
            "turns_mean": statistics.fmean(ep.num_turns for ep in episodes),
            **self.env.label_rates(episodes),
            **self.env.summarize(episodes),
            "entropy": ustats.entropy,
            "approx_kl": ustats.approx_kl,
            "ref_kl": ustats.ref_kl,
            "clip_fraction": ustats.clip_fraction,
            "dual_clip_fraction": ustats.dual_clip_fraction,
            "grad_norm": ustats.grad_norm,
            "skipped_updates": ustats.skipped_updates,
            "loss": ustats.loss,
            "expert_nll": ustats.expert_nll,
            "logprob_gap": ustats.logprob_gap,
            "logprob_gap_max": ustats.logprob_gap_max,
            "tis_capped": ustats.tis_capped,
            "tokens_generated": rstats.tokens_generated,
            "tokens_prompt": rstats.tokens_prompt,
            "tokens_trained": ustats.tokens,
            "seconds_rollout": t_rollout,
            "seconds_generate": rstats.seconds_generate,
            "seconds_oracle": rstats.seconds_env,
            "seconds_update": t_update,
            "update_tokens_per_s": ustats.sequence_tokens / t_update if t_update > 0 else 0.0,
            "resident_mib": resident_mib(self.scorer, self.optimizer),
            "bf16_update": self.bf16,
            "sampler_dtype": self.session.sampler_dtype,
        }
