"""The PPO update of one step's episodes: micro-batches, minibatches and epochs, π_old, the
gradient accumulation across micro-batches and ranks, and the optimizer step. The loss itself is
`PPOLoss` (train/loss.py).

`PPOUpdate` is a part of `Trainer`, kept in its own module so each stays readable: it uses the
trainer's `cfg`, `model`, `scorer` (the model as `ActionLogits`, possibly sharded),
`ref_scorer`, `params`, `optimizer`, `dist`, `session`, `bf16`, `warmup_steps` and `step_idx`.
"""

from __future__ import annotations

import logging
import math
import os
import random
from dataclasses import dataclass
from typing import Callable

import torch

from turncredit.config import TrainConfig
from turncredit.episode import Episode
from turncredit.policy.scoring import TokenBatch, Trunk, action_logprobs, autocast, idle_batch, model_device
from turncredit.train.distributed import full_tensor
from turncredit.train.forward import episodes_to_batch
from turncredit.train.loss import PPOLoss, expert_nll, truncated_is_weights
from turncredit.train.schedule import optimizer_steps_taken, set_lr, warmup_lr

log = logging.getLogger(__name__)


@dataclass
class UpdateStats:
    """What one `Trainer.update` did; the loss terms are means over its optimizer steps.
    The field names are the metrics.jsonl keys (see `Trainer._metrics`)."""

    loss: float = 0.0
    clip_fraction: float = 0.0
    dual_clip_fraction: float = 0.0  # share of action tokens whose loss train.dual_clip capped
    approx_kl: float = 0.0
    ref_kl: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    logprob_gap: float = 0.0  # mean |trainer − sampler| log-prob on the sampled action tokens
    logprob_gap_max: float = 0.0  # the largest of those
    tis_capped: float = 0.0  # share of action tokens whose importance weight hit train.tis_cap
    expert_nll: float = 0.0  # mean −log π_θ of the guided members' expert tokens (with algo.expert_sft_coef)
    tokens: int = 0  # action tokens trained on
    sequence_tokens: int = 0  # all non-padding tokens forwarded (what TRL counts as num_tokens)
    optimizer_steps: int = 0
    skipped_updates: int = 0  # optimizer steps not taken because the loss or gradient was not finite


#: the loss terms logged per optimizer step (weighted over micro-batches like the loss): the
#: `PPOLoss` stats and the expert's SFT loss (`expert_nll`, "loss" leaves it out)
LOSS_STATS = ("loss", "clip_fraction", "dual_clip_fraction", "approx_kl", "ref_kl", "entropy", "expert_nll")


class OldPolicy:
    """π_old's log-probs per micro-batch, and how far the sampler's were from them.

    A micro-batch of the first minibatch takes π_old from its own first gradient pass (the
    policy has not moved yet, see `needs_old_pass`), so both are settled the first time a
    micro-batch is trained on and then kept for every later epoch."""

    def __init__(self, logprobs: list[torch.Tensor | None], tis: bool, tis_cap: float) -> None:
        self.logprobs = logprobs
        self.tis, self.tis_cap = tis, tis_cap
        self.is_weights: dict[int, torch.Tensor | None] = {}
        self.gap_sum = self.gap_max = self.capped = 0.0  # over action tokens: |π_old − π_sampler| in log-prob
        self.sampled = 0  # action tokens the sampler drew (not an expert's)

    def get(self, i: int, logprobs: torch.Tensor, batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Micro-batch i's π_old log-probs and truncated importance weights (None without TIS),
        given the current policy's `logprobs` of it."""
        if self.logprobs[i] is None:
            self.logprobs[i] = logprobs.detach()
        old = self.logprobs[i]
        if i not in self.is_weights:
            # an expert's token (no sampler) counts as drawn by π_old: weight 1, no gap
            expert = batch.expert_targets
            sampler = torch.where(expert, old, batch.sampler_logprobs)
            weights = truncated_is_weights(old, sampler, batch.targets, self.tis_cap) if self.tis else None
            self.is_weights[i] = weights
            gap = (old - sampler).abs() * batch.targets
            self.sampled += int((batch.targets.bool() & ~expert).sum())
            self.gap_sum += gap.sum().item()
            self.gap_max = max(self.gap_max, gap.max().item())
            if weights is not None:
                self.capped += ((weights >= self.tis_cap) & batch.targets.bool()).sum().item()
        return old, self.is_weights[i]


def minibatch_schedule(n: int, train: TrainConfig, rng: random.Random) -> list[list[list[int]]]:
    """Per epoch, the minibatches (lists of micro-batch indices) in the order they are applied:
    each epoch reshuffles the previous epoch's order and deals it into `minibatches` groups."""
    order, epochs = list(range(n)), []
    for _ in range(train.ppo_epochs):
        rng.shuffle(order)
        epochs.append([order[i::train.minibatches] for i in range(train.minibatches)])
    return epochs


def needs_old_pass(schedule: list[list[list[int]]], n: int) -> list[int]:
    """Micro-batches whose old log-probs need a separate no-grad forward before the first
    optimizer step. The first minibatch of the first epoch is seen before the policy moves, so
    its old log-probs are its gradient pass's own, detached (one epoch and one minibatch: none
    at all); every later one must be scored by the policy that sampled."""
    first = set(schedule[0][0]) if schedule and schedule[0] else set()
    return [i for i in range(n) if i not in first]


def micro_batches(episodes: list[Episode], train: TrainConfig, shared_prefixes: bool = False) -> list[list[Episode]]:
    """Micro-batches of `micro_batch_size` episodes each, or, with `micro_batch_tokens`, as many
    as fit that many tokens forwarded (at least one), so memory follows the tokens held, not
    the number of episodes (the loss is order-free).

    Padded batches (`shared_prefixes` false) take the episodes longest first, so similar
    lengths share one and a chunk forwards longest × count tokens. A scorer that runs shared
    prefixes once (`ActionLogits`' prefix tree) takes them in token order instead: a group's
    members, and a guided member beside the peer whose turns it took over, then share one
    micro-batch, and each episode adds only its tokens past the one before it."""
    ids = {id(ep): ep.token_ids() for ep in episodes}
    if shared_prefixes:
        ordered = sorted(episodes, key=lambda ep: ids[id(ep)])
    else:
        ordered = sorted(episodes, key=lambda ep: len(ids[id(ep)]), reverse=True)
    if not train.micro_batch_tokens:
        return [ordered[i:i + train.micro_batch_size] for i in range(0, len(ordered), train.micro_batch_size)]
    chunks: list[list[Episode]] = []
    held = 0  # tokens the current chunk forwards
    for ep in ordered:
        seq = ids[id(ep)]
        if not chunks:
            cost = len(seq)
        elif shared_prefixes:
            cost = held + len(seq) - len(os.path.commonprefix([ids[id(chunks[-1][-1])], seq]))
        else:  # descending: a chunk's first episode is its longest
            cost = len(ids[id(chunks[-1][0])]) * (len(chunks[-1]) + 1)
        if chunks and cost <= train.micro_batch_tokens:
            chunks[-1].append(ep)
            held = cost
        else:
            chunks.append([ep])
            held = len(seq)
    return chunks


class PPOUpdate:
    """`Trainer.update` and the steps it takes (see the module docstring for what it uses)."""

    def _num_micro_steps(self, episodes: list[Episode]) -> int:
        return self.cfg.train.ppo_epochs * len(self._micro_batches(episodes))

    def _micro_batches(self, episodes: list[Episode]) -> list[list[Episode]]:
        return micro_batches(episodes, self.cfg.train, shared_prefixes=getattr(self.scorer, "share_prefix", False))

    def update(self, episodes: list[Episode], on_micro_batch: Callable[[int], None] | None = None) -> UpdateStats:
        """PPO on this rank's share of a step's episodes; the loss is `PPOLoss`, plus
        `algo.expert_sft_coef` × the SFT loss on the guided members' expert tokens.

        The episodes are packed into micro-batches. Each of `train.ppo_epochs` epochs deals them
        into `train.minibatches` minibatches, and each minibatch is one optimizer step on its
        gradient, accumulated over its micro-batches and summed over ranks. π_old is the trainer's
        own policy before the first step (not the sampler's); `on_micro_batch(1)` follows every
        micro-batch's backward pass.
        """
        stats = UpdateStats()
        if self.dist.sum_floats([len(episodes)])[0] == 0:
            return stats
        train = self.cfg.train
        device = model_device(self.model)
        batches = [episodes_to_batch(chunk, self.session.pad_id).to(device) for chunk in self._micro_batches(episodes)]
        schedule = minibatch_schedule(len(batches), train, random.Random(self.cfg.run.seed * 7919 + self.step_idx))
        trunks, old_logprobs, ref_logprobs = self._score_before_update(batches, schedule)
        tis = self.session.samples_from_a_copy if train.tis == "auto" else bool(train.tis)
        old = OldPolicy(old_logprobs, tis, train.tis_cap)
        loss_fn = PPOLoss.from_config(train)

        self.model.train()
        totals = dict.fromkeys((*LOSS_STATS, "grad_norm"), 0.0)  # summed over the optimizer steps taken
        for epoch in schedule:
            for minibatch in epoch:
                logged = self._accumulate_gradients(minibatch, batches, trunks, old, ref_logprobs, loss_fn,
                                                    on_micro_batch)
                if logged is None:  # no action token in this minibatch on any rank
                    continue
                grad_norm = self._optimizer_step(logged["loss"])
                if grad_norm is None:
                    stats.skipped_updates += 1
                    continue
                logged["grad_norm"] = grad_norm
                for key in totals:
                    totals[key] += logged[key]
                stats.optimizer_steps += 1
        for key, total in totals.items():
            setattr(stats, key, total / max(1, stats.optimizer_steps))
        stats.tokens = sum(b.num_tokens for b in batches)
        stats.logprob_gap = old.gap_sum / max(1, old.sampled)
        stats.logprob_gap_max, stats.tis_capped = old.gap_max, old.capped / max(1, stats.tokens)
        stats.sequence_tokens = sum(int(b.attention_mask.sum()) for b in batches)
        return stats

    def _score_before_update(self, batches: list[TokenBatch], schedule: list[list[list[int]]]
                             ) -> tuple[list[Trunk | None], list[torch.Tensor | None], list[torch.Tensor] | None]:
        """Each micro-batch's output of the frozen bottom layers (`ActionLogits.trunk`: with
        `train.trainable_layers` they run once per update, not once per pass; None without),
        π_old's log-probs of the micro-batches that need a pass of their own (`needs_old_pass`;
        None for the rest) and, with a KL penalty, the reference policy's of every micro-batch."""
        temperature = self.cfg.rollout.temperature
        idle = idle_batch(self.session.pad_id)
        scored = needs_old_pass(schedule, len(batches))
        old: list[torch.Tensor | None] = [None] * len(batches)
        ref = None
        self.model.eval()
        # a sharded forward is a collective: every rank runs as many as the busiest one
        with torch.no_grad(), autocast(self.bf16):
            trunks = [self.scorer.trunk(b.input_ids, b.attention_mask) for b in batches]
            for i in scored + [-1] * (self.dist.forward_passes(len(scored)) - len(scored)):
                logprobs = action_logprobs(self.scorer, batches[i] if i >= 0 else idle, temperature,
                                           trunk=trunks[i] if i >= 0 else None)[0]
                if i >= 0:
                    old[i] = logprobs
            if self.cfg.train.kl != "none":
                padded = batches + [idle] * (self.dist.forward_passes(len(batches)) - len(batches))
                ref = [self._ref_logprobs(b, temperature) for b in padded][:len(batches)]
        return trunks, old, ref

    def _accumulate_gradients(
        self, minibatch: list[int], batches: list[TokenBatch], trunks: list[Trunk | None], old: OldPolicy,
        ref_logprobs: list[torch.Tensor] | None, loss_fn: PPOLoss, on_micro_batch: Callable[[int], None] | None,
    ) -> dict[str, float] | None:
        """Backpropagate one minibatch's loss into the gradients (the same on every rank) and
        return its `LOSS_STATS`, summed over ranks; None when no rank has an action token in it.
        Each micro-batch's loss is weighted by its share of the minibatch (`_micro_size`), so the
        minibatch is aggregated as one batch; the logged values are weighted the same way."""
        temperature, entropy_grad = self.cfg.rollout.temperature, bool(self.cfg.train.entropy_coef)
        sizes = [self._micro_size(batches[i]) for i in minibatch]
        total = self.dist.sum_floats([sum(sizes)])[0]  # the minibatch over all ranks
        if total == 0:
            return None
        sft_coef = self.cfg.algo.expert_sft_coef
        expert_total = (self.dist.sum_floats([sum(int(batches[i].expert_targets.sum()) for i in minibatch)])[0]
                        if sft_coef else 0)
        # a sharded forward is a collective: a rank with fewer micro-batches adds empty passes
        idle_passes = self.dist.forward_passes(len(minibatch)) - len(minibatch)
        self.optimizer.zero_grad(set_to_none=True)
        logged = dict.fromkeys(LOSS_STATS, 0.0)
        for i, size in zip(minibatch, sizes):
            batch, weight = batches[i], size / total
            with autocast(self.bf16):
                logprobs, entropy = action_logprobs(self.scorer, batch, temperature, with_entropy=True,
                                                    entropy_grad=entropy_grad, trunk=trunks[i])
            old_logprobs, is_weights = old.get(i, logprobs, batch)
            loss, info = loss_fn(logprobs, old_logprobs, batch.advantages, batch.targets, entropy,
                                 ref_logprobs=None if ref_logprobs is None else ref_logprobs[i], is_weights=is_weights)
            loss = loss * weight
            if sft_coef and expert_total:  # + μ · (SFT loss on the expert's tokens, token mean over the minibatch)
                nll = expert_nll(logprobs, batch.expert_targets) / expert_total
                loss = loss + sft_coef * nll
                logged["expert_nll"] += nll.item()
            loss.backward()
            if on_micro_batch is not None:
                on_micro_batch(1)
            for key in info.keys() & logged.keys():
                logged[key] += weight * info[key]
        for _ in range(idle_passes):
            with autocast(self.bf16):  # a zero-weight pass: this rank's part in the collectives
                logprobs, _ = action_logprobs(self.scorer, idle_batch(self.session.pad_id), temperature)
            (logprobs.sum() * 0.0).backward()
        self.dist.sum_gradients(self.params)  # the global minibatch's gradient on every rank
        return dict(zip(logged, self.dist.sum_floats(list(logged.values()))))

    def _optimizer_step(self, loss: float) -> float | None:
        """Clip the gradient and step; returns the gradient norm before clipping, or None when the
        loss or the gradient is not finite and the step is skipped (one bad minibatch, an overflow
        or a NaN advantage, must not poison the weights)."""
        train = self.cfg.train
        grad_norm = full_tensor(torch.nn.utils.clip_grad_norm_(self.params, train.grad_clip if train.grad_clip > 0 else math.inf))
        if not (torch.isfinite(grad_norm) and math.isfinite(loss)):
            log.warning("step %d: skipped an optimizer step (loss %s, gradient norm %s)",
                        self.step_idx + 1, loss, float(grad_norm))
            self.optimizer.zero_grad(set_to_none=True)
            return None
        set_lr(self.optimizer, warmup_lr(train.lr, optimizer_steps_taken(self.optimizer), self.warmup_steps))
        self.optimizer.step()
        return float(grad_norm)

    def _ref_logprobs(self, batch: TokenBatch, temperature: float) -> torch.Tensor:
        """The KL reference's log-probs: the starting policy (LoRA's adapter off, or a frozen copy)."""
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
