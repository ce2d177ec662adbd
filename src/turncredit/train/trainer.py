"""The RL loop: sample tasks → roll out groups → credit → filter → PPO-clip update → log.

Each stage reads and writes `Episode`s; the trainer only wires them together.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from turncredit.config import (
    RESUMABLE_CHANGES, Config, ConfigError, TrainConfig, config_differences, env_from_config, load_config, save_config,
)
from turncredit.credit import assign_advantages
from turncredit.rewards import SHAPERS
from turncredit.credit.filters import group_reward_std, variance_filter
from turncredit.episode import Episode, write_episodes
from turncredit.evaluate import label_rates
from turncredit.loggers import make_loggers
from turncredit.progress import Progress
from turncredit.rollout import RolloutStats, SamplingParams, resolve_refill, run_episodes
from turncredit.policy.session import PolicySession
from turncredit.precision import choose_precision
from turncredit.train.checkpoint import (
    FINAL_DIR, CheckpointError, clean_leftovers, discard, keep_steps_up_to, latest_checkpoint, load_checkpoint, prune,
    step_dir_name, write_checkpoint,
)
from turncredit.train.distributed import PARALLEL, full_tensor, resident_mib
from turncredit.train.forward import (
    action_logprobs, autocast, enable_activation_checkpointing, episodes_to_batch, idle_batch, model_device,
)
from turncredit.train.loss import aggregate, kl_penalty, ppo_clip_loss, truncated_is_weights
from turncredit.train.optim import adamw
from turncredit.train.schedule import optimizer_steps_taken, set_lr, warmup_lr, warmup_steps

log = logging.getLogger(__name__)


@dataclass
class UpdateStats:
    loss: float = 0.0
    clip_fraction: float = 0.0
    dual_clip_fraction: float = 0.0  # share of action tokens whose loss train.dual_clip capped
    approx_kl: float = 0.0
    ref_kl: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    logprob_gap: float = 0.0  # mean |trainer − sampler| log-prob on action tokens
    logprob_gap_max: float = 0.0  # the largest of those
    tis_capped: float = 0.0  # share of action tokens whose importance weight hit train.tis_cap
    tokens: int = 0  # action tokens trained on
    sequence_tokens: int = 0  # all non-padding tokens forwarded (what TRL counts as num_tokens)
    optimizer_steps: int = 0
    skipped_updates: int = 0  # optimizer steps not taken because the loss or gradient was not finite


def minibatch_schedule(n: int, t: TrainConfig, rng: random.Random) -> list[list[list[int]]]:
    """Per epoch, the minibatches (lists of micro-batch indices) in the order they are applied:
    each epoch reshuffles the previous epoch's order and deals it into `minibatches` groups."""
    order, epochs = list(range(n)), []
    for _ in range(t.ppo_epochs):
        rng.shuffle(order)
        epochs.append([order[i::t.minibatches] for i in range(t.minibatches)])
    return epochs


def needs_old_pass(schedule: list[list[list[int]]], n: int) -> list[int]:
    """Micro-batches whose old log-probs need a separate no-grad forward before the first
    optimizer step. The first minibatch of the first epoch is seen before the policy moves, so
    its old log-probs are its gradient pass's own, detached (one epoch and one minibatch: none
    at all); every later one must be scored by the policy that sampled."""
    first = set(schedule[0][0]) if schedule and schedule[0] else set()
    return [i for i in range(n) if i not in first]


def micro_batches(episodes: list[Episode], t: TrainConfig) -> list[list[Episode]]:
    """Length-sorted micro-batches (similar lengths share one: less padding; the loss is
    order-free): `micro_batch_size` episodes each, or, with `micro_batch_tokens`, as many as fit
    that many padded tokens (longest × count), at least one, so memory follows the tokens held,
    not the number of episodes."""
    by_len = sorted(episodes, key=lambda ep: len(ep.token_ids()), reverse=True)
    if not t.micro_batch_tokens:
        return [by_len[i:i + t.micro_batch_size] for i in range(0, len(by_len), t.micro_batch_size)]
    chunks: list[list[Episode]] = []
    for ep in by_len:  # descending: a chunk's first episode is its longest
        if chunks and len(chunks[-1][0].token_ids()) * (len(chunks[-1]) + 1) <= t.micro_batch_tokens:
            chunks[-1].append(ep)
        else:
            chunks.append([ep])
    return chunks


def group_id(step: int, j: int) -> str:
    """The id of task group j of a step (the same on every rank)."""
    return f"s{step}-g{j}"


def check_applicable(cfg: Config, env: Any) -> None:
    """A reward shaper that needs task fields this environment lacks is a config error now,
    not a crash (or silent zeros) after the first rollout."""
    need = getattr(SHAPERS.get(cfg.algo.reward_shaper), "requires_task", ())
    tasks = env.tasks("train") if need else []
    missing = [f for f in need if tasks and f not in tasks[0].data]
    if missing:
        raise ConfigError(f"algo.reward_shaper: {cfg.algo.reward_shaper!r} needs tasks with {', '.join(map(repr, missing))}; "
                          f"environment {cfg.env.name!r} has none (its task fields: {', '.join(sorted(tasks[0].data))})")


class Trainer:
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
        t = cfg.train
        # the KL reference is the starting policy (cfg.model.name), also when resuming: LoRA
        # switches its adapter off, full fine-tuning keeps a frozen copy (made before sharding)
        frozen = None
        if t.kl != "none" and not hasattr(self.model, "disable_adapter"):
            frozen = copy.deepcopy(self.model).eval().requires_grad_(False)
        if t.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        self.scorer = self.dist.wrap(self.model)  # what the update runs forward through
        self.ref_scorer = self.dist.wrap(frozen) if frozen is not None else None
        self.params = [p for p in self.scorer.parameters() if p.requires_grad]
        self.optimizer = adamw(self.params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay)
        self.warmup_steps = warmup_steps(t.lr_warmup_steps, t.lr_warmup_ratio, t.steps * t.ppo_epochs * t.minibatches)
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
        rng = random.Random(self.cfg.run.seed * 1_000_003 + step)
        tasks = self.env.sample_tasks("train", self.cfg.rollout.tasks_per_step, rng)
        g = self.cfg.rollout.group_size
        return [t for t in tasks for _ in range(g)], [group_id(step, j) for j in range(len(tasks)) for _ in range(g)]

    def rollout(self, step: int) -> tuple[list[Episode], RolloutStats]:
        """The step's episodes, all groups (each rank plays its own groups, then they are shared)."""
        return self._share(*self._play_own_groups(step))

    def _play_own_groups(self, step: int) -> tuple[list[int], list[Episode], RolloutStats]:
        r = self.cfg.rollout
        tasks, gids = self.sample_groups(step)
        my_groups = set(self.dist.my_groups(r.tasks_per_step))
        mine = [i for i in range(len(tasks)) if i // r.group_size in my_groups]
        stats = RolloutStats()
        with self.progress.phase(f"step {step}/{self.cfg.train.steps} rollout", len(mine), "episode") as bar:
            eps = run_episodes(
                self.env, self.session.backend, self.session.bridge, [tasks[i] for i in mine], [gids[i] for i in mine],
                SamplingParams.of(r),
                seed=self.cfg.run.seed * 1_000_003 + step, batch_size=r.batch_size, stats=stats,
                on_finished=bar.update, refill=resolve_refill(r.continuous_batching, self.session.device),
            )
        return mine, eps, stats

    def _share(self, mine: list[int], eps: list[Episode], stats: RolloutStats) -> tuple[list[Episode], RolloutStats]:
        """Every rank's episodes, in task order, on every rank."""
        if not self.dist.enabled:
            return eps, stats
        shared = self.dist.gather((mine, eps, stats))
        by_index = {i: ep for idx, part, _ in shared for i, ep in zip(idx, part)}
        total = RolloutStats()
        for _, _, st in shared:  # counts add up; seconds are the slowest rank's
            for k, v in vars(st).items():
                setattr(total, k, max(getattr(total, k), v) if k.startswith("seconds") else getattr(total, k) + v)
        return [by_index[i] for i in sorted(by_index)], total

    def train_step(self) -> dict[str, Any]:
        step = self.step_idx + 1
        t0 = time.perf_counter()
        counted = self.env.counters()
        a = self.cfg.algo
        shaper = SHAPERS.get(a.reward_shaper)
        with self.dist.full_weights(self.scorer):  # generation and shaping read whole weights
            mine, own, rstats = self._play_own_groups(step)
            t_rollout = time.perf_counter() - t0
            # shapers are group-local and a group never spans ranks: each rank shapes its own
            t_shape = time.perf_counter()
            policy = {"policy": self.session} if getattr(shaper, "needs_policy", False) else {}
            shaper(own, step, **policy, **a.shaper_options)
            t_shape = self.dist.gather(time.perf_counter() - t_shape)
        episodes, rstats = self._share(mine, own, rstats)
        env_counts = {k: v - counted.get(k, 0) for k, v in self.env.counters().items()}
        env_counts = dict(zip(env_counts, (int(x) for x in self.dist.sum_floats(list(env_counts.values())))))

        assign_advantages(episodes, a.estimator, **a.estimator_options)
        kept = variance_filter(episodes, a.keep_group_fraction)
        trainable = [ep for ep in kept if not ep.aborted and ep.turns]
        my_gids = {group_id(step, j) for j in self.dist.my_groups(self.cfg.rollout.tasks_per_step)}
        local = [ep for ep in trainable if ep.group_id in my_gids] if self.dist.enabled else trainable

        t1 = time.perf_counter()
        with self.progress.phase(f"step {step}/{self.cfg.train.steps} update", self._num_micro_steps(local), "micro-batch") as bar:
            ustats = self.update(local, on_micro_batch=bar.update)
        t_refresh = time.perf_counter()
        if ustats.optimizer_steps:
            self._refresh_sampler()
        t_refresh = time.perf_counter() - t_refresh
        t_update = time.perf_counter() - t1
        self.step_idx = step

        metrics = {**self._metrics(step, episodes, trainable, rstats, ustats, t_rollout, t_update), **env_counts,
                   "seconds_shaping": max(t_shape), "seconds_sampler_refresh": t_refresh}
        # episodes, then the metrics line, then the checkpoint: a step is complete once its
        # checkpoint exists, and a resume redoes (and rewrites) any step after the last one
        if self.dist.is_main:
            self._write_step(step, episodes, metrics)
        t = self.cfg.train
        if t.save_every and step % t.save_every == 0 and step < t.steps:
            self.save(step_dir_name(step))
            if self.dist.is_main:
                prune(self.run_dir, t.keep_last)
        return metrics

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

    # ------------------------------------------------------------------ PPO update

    def _num_micro_steps(self, episodes: list[Episode]) -> int:
        return self.cfg.train.ppo_epochs * len(micro_batches(episodes, self.cfg.train))

    def update(self, episodes: list[Episode], on_micro_batch: Callable[[int], None] | None = None) -> UpdateStats:
        st = UpdateStats()
        if self.dist.sum_floats([len(episodes)])[0] == 0:
            return st
        t = self.cfg.train
        temp = self.cfg.rollout.temperature
        pad = self.session.pad_id
        device = model_device(self.model)
        batches = [episodes_to_batch(c, pad).to(device) for c in micro_batches(episodes, t)]

        schedule = minibatch_schedule(len(batches), t, random.Random(self.cfg.run.seed * 7919 + self.step_idx))
        # old log-probs come from the trainer's own forward pass, not the sampler
        scored = needs_old_pass(schedule, len(batches))
        idle = idle_batch(self.session.pad_id)
        # a sharded forward is a collective: every rank runs as many as the busiest one
        self.model.eval()
        with torch.no_grad(), autocast(self.bf16):
            olds: list[torch.Tensor | None] = [None] * len(batches)
            for i in scored + [-1] * (self.dist.forward_passes(len(scored)) - len(scored)):
                logp = action_logprobs(self.scorer, batches[i] if i >= 0 else idle, temp)[0]
                if i >= 0:
                    olds[i] = logp
            refs = None
            if t.kl != "none":
                padded = batches + [idle] * (self.dist.forward_passes(len(batches)) - len(batches))
                refs = [self._ref_logprobs(b, temp) for b in padded][:len(batches)]
        gap = gap_max = capped = 0.0
        is_weights: dict[int, torch.Tensor | None] = {}  # per micro-batch, fixed across epochs
        tis = self.session.samples_from_a_copy if t.tis == "auto" else bool(t.tis)

        self.model.train()
        sums: dict[str, float] = {"loss": 0.0, "clip": 0.0, "dual": 0.0, "akl": 0.0, "rkl": 0.0, "ent": 0.0,
                                  "gn": 0.0}
        for groups in schedule:
            for group in groups:
                sizes = [self._micro_size(batches[i]) for i in group]
                total = self.dist.sum_floats([sum(sizes)])[0]  # the minibatch over all ranks
                if total == 0:
                    continue
                weights = [s / total for s in sizes]
                idle_passes = self.dist.forward_passes(len(group)) - len(group)
                self.optimizer.zero_grad(set_to_none=True)
                mb = dict.fromkeys(sums, 0.0)  # this minibatch's share, kept only if it is applied
                for i, w in zip(group, weights):
                    b = batches[i]
                    with autocast(self.bf16):
                        logp, ent = action_logprobs(self.scorer, b, temp, with_entropy=True,
                                                    entropy_grad=bool(t.entropy_coef))
                    if olds[i] is None:
                        olds[i] = logp.detach()
                    if i not in is_weights:  # the sampler's gap and weights, once per micro-batch
                        w_is = truncated_is_weights(olds[i], b.sampler_logprobs, b.targets, t.tis_cap) if tis else None
                        is_weights[i] = w_is
                        diff = (olds[i] - b.sampler_logprobs).abs() * b.targets
                        gap += diff.sum().item()
                        gap_max = max(gap_max, diff.max().item())
                        if w_is is not None:
                            capped += ((w_is >= t.tis_cap) & b.targets.bool()).sum().item()
                    loss, info = ppo_clip_loss(
                        logp, olds[i], b.advantages, b.targets,
                        clip_low=t.clip_low, clip_high=t.clip_high, agg=t.loss_agg, is_weights=is_weights[i],
                        dual_clip=t.dual_clip,
                    )
                    ent_mean = aggregate(ent, b.targets, t.loss_agg)
                    if t.entropy_coef:
                        loss = loss - t.entropy_coef * ent_mean
                    if refs is not None:
                        kl = aggregate(kl_penalty(logp, refs[i], t.kl), b.targets, t.loss_agg)
                        loss = loss + t.kl_coef * kl
                        mb["rkl"] += w * kl.item()
                    (loss * w).backward()
                    if on_micro_batch is not None:
                        on_micro_batch(1)
                    # logged values are weighted like the loss, so they describe what was optimised
                    mb["loss"] += w * loss.item()
                    mb["clip"] += w * float(info["clip_fraction"])
                    mb["dual"] += w * float(info["dual_clip_fraction"])
                    mb["akl"] += w * float(info["approx_kl"])
                    mb["ent"] += w * ent_mean.item()
                for _ in range(idle_passes):
                    with autocast(self.bf16):  # a zero-weight pass: this rank's part in the collectives
                        logp, _ = action_logprobs(self.scorer, idle_batch(self.session.pad_id), temp)
                    (logp.sum() * 0.0).backward()
                self.dist.sum_gradients(self.params)  # the global minibatch's gradient on every rank
                mb = dict(zip(mb, self.dist.sum_floats(list(mb.values()))))
                gn = full_tensor(torch.nn.utils.clip_grad_norm_(self.params, t.grad_clip if t.grad_clip > 0 else math.inf))
                if not (torch.isfinite(gn) and math.isfinite(mb["loss"])):
                    # one bad minibatch (an overflow, a NaN advantage) must not poison the weights
                    log.warning("step %d: skipped an optimizer step (loss %s, gradient norm %s)",
                                self.step_idx + 1, mb["loss"], float(gn))
                    self.optimizer.zero_grad(set_to_none=True)
                    st.skipped_updates += 1
                    continue
                set_lr(self.optimizer, warmup_lr(t.lr, optimizer_steps_taken(self.optimizer), self.warmup_steps))
                self.optimizer.step()
                mb["gn"] = float(gn)
                for k in sums:
                    sums[k] += mb[k]
                st.optimizer_steps += 1
        n = max(1, st.optimizer_steps)
        st.loss, st.clip_fraction, st.approx_kl = sums["loss"] / n, sums["clip"] / n, sums["akl"] / n
        st.ref_kl, st.entropy, st.dual_clip_fraction = sums["rkl"] / n, sums["ent"] / n, sums["dual"] / n
        st.grad_norm = sums["gn"] / max(1, st.optimizer_steps)
        st.tokens = sum(b.num_tokens for b in batches)
        st.logprob_gap = gap / max(1, st.tokens)
        st.logprob_gap_max, st.tis_capped = gap_max, capped / max(1, st.tokens)
        st.sequence_tokens = sum(int(b.attention_mask.sum()) for b in batches)
        return st

    def _ref_logprobs(self, batch, temperature: float) -> torch.Tensor:
        if self.ref_scorer is not None:
            return action_logprobs(self.ref_scorer, batch, temperature)[0]
        with self.model.disable_adapter():
            return action_logprobs(self.scorer, batch, temperature)[0]

    def _micro_size(self, b) -> int:
        """A micro-batch's weight in its minibatch's loss (tokens, or sequences), so the minibatch
        loss is aggregated once over all its micro-batches, on all ranks."""
        if self.cfg.train.loss_agg == "token-mean":
            return b.num_tokens
        return int((b.targets.sum(dim=1) > 0).sum())

    # ------------------------------------------------------------------ metrics

    def _metrics(self, step, episodes, trainable, rstats, ustats, t_rollout, t_update) -> dict[str, Any]:
        rewards = [ep.total_reward for ep in episodes]
        stds = list(group_reward_std(episodes).values())
        return {
            "step": step,
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.pstdev(rewards),
            "success_rate": statistics.fmean(float(ep.success) for ep in episodes),
            "group_reward_std": statistics.fmean(stds) if stds else 0.0,
            "episodes": len(episodes),
            "episodes_trained": len(trainable),
            "aborted": sum(ep.aborted for ep in episodes),
            "turns_mean": statistics.fmean(ep.num_turns for ep in episodes),
            **label_rates(episodes),
            **self.env.summarize(episodes),
            "entropy": ustats.entropy,
            "approx_kl": ustats.approx_kl,
            "ref_kl": ustats.ref_kl,
            "clip_fraction": ustats.clip_fraction,
            "dual_clip_fraction": ustats.dual_clip_fraction,
            "grad_norm": ustats.grad_norm,
            "skipped_updates": ustats.skipped_updates,
            "loss": ustats.loss,
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
