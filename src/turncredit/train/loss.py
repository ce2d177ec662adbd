"""Policy-update math as pure tensor functions (no model code).

Shapes: B sequences × T positions. `mask` is 1/True on the policy's own action tokens and
0/False everywhere else (prompt, observation, padding); masked positions never influence a
value or a gradient, even if they hold garbage such as -inf log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from turncredit.registry import Registry

if TYPE_CHECKING:
    from turncredit.config import TrainConfig

# --- loss aggregation -------------------------------------------------------------------------

Aggregation = Callable[[Tensor, Tensor], Tensor]
AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


def _masked(values: Tensor, mask: Tensor) -> Tensor:
    """values where mask, else 0 (a `where`, not a product: 0 · nan would be nan)."""
    return torch.where(mask, values, torch.zeros_like(values))


@AGGREGATIONS.register("token-mean")
def _token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """L = Σ_{b,t} v·m / Σ_{b,t} m  — every action token in the batch weighs the same."""
    return _masked(values, mask).sum() / mask.sum().clamp(min=1)


@AGGREGATIONS.register("seq-mean-token-mean")
def _seq_mean_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """L = mean_b [ Σ_t v·m / Σ_t m ]  over sequences with at least one action token."""
    n_tok = mask.sum(dim=-1)
    has = n_tok > 0
    per_seq = _masked(values, mask).sum(dim=-1)[has] / n_tok[has]
    return per_seq.mean() if has.any() else _masked(values, mask).sum()


@AGGREGATIONS.register("seq-mean-token-sum")
def _seq_mean_token_sum(values: Tensor, mask: Tensor) -> Tensor:
    """L = mean_b [ Σ_t v·m ]  over sequences with at least one action token (Dr.GRPO-style)."""
    has = mask.sum(dim=-1) > 0
    per_seq = _masked(values, mask).sum(dim=-1)[has]
    return per_seq.mean() if has.any() else _masked(values, mask).sum()


def aggregate(values: Tensor, mask: Tensor, mode: str) -> Tensor:
    """Reduce per-token `values` [B, T] to a scalar with aggregation `mode`.

    Modes: "token-mean", "seq-mean-token-mean", "seq-mean-token-sum" (see `AGGREGATIONS`).
    Sequences without action tokens are skipped by the seq-* modes; a batch without any action
    token gives 0 (still attached to the graph). Unknown mode → KeyError listing known ones.
    """
    fn = AGGREGATIONS.get(mode)
    _check_same_2d(values=values, mask=mask)
    return fn(values, mask.bool())


# --- PPO-clip ---------------------------------------------------------------------------------


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: str = "token-mean",
    is_weights: Tensor | None = None,
    dual_clip: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with DAPO's asymmetric "clip-higher", and optionally dual-clip.

        ratio = exp(logp − logp_old)
        ℓ_t   = −w_t · min( ratio·A,  clip(ratio, 1 − clip_low, 1 + clip_high)·A )
        ℓ_t   = −w_t · max( min(ratio·A, clip(ratio)·A),  c·A )     where A < 0, with dual_clip c > 1
        L     = aggregate(ℓ, mask, agg)

    Dual-clip (Ye et al. 2020; verl's `clip_ratio_c`, 3 in the StarPO/CIA recipes) bounds a
    negative-advantage token's loss at c·|A|: a token whose ratio has run past c (the policy
    now far likelier to take an action the advantage says is bad) stops pushing the update.

    `advantages` is per token [B, T] or per sequence [B] (broadcast over T); it,
    `old_logprobs` and `is_weights` w (1 when None; see `truncated_is_weights`) are treated
    as constants. The clipped term is the active one (and the
    token's gradient is 0) when A > 0 and ratio > 1 + clip_high, or A < 0 and
    ratio < 1 − clip_low.

    Stats (floats, over action tokens): clip_fraction (= clip_fraction_low + _high),
    approx_kl = mean(logp_old − logp), ratio_mean.
    """
    _check_same_2d(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    if advantages.dim() == 1 and advantages.shape[0] == logprobs.shape[0]:
        advantages = advantages.unsqueeze(-1)
    elif advantages.shape != logprobs.shape:
        raise ValueError(
            f"advantages must have shape [B] = [{logprobs.shape[0]}] or [B, T] = "
            f"{list(logprobs.shape)}, got {list(advantages.shape)}"
        )
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low!r}")
    if not clip_high >= 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high!r}")
    if dual_clip and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be 0 (off) or > 1, got {dual_clip!r}")

    mask = mask.bool()
    adv = advantages.detach().to(logprobs.dtype)
    # zero the log-ratio off the mask so padding garbage can't reach exp() (inf → nan grads)
    log_ratio = _masked(logprobs - old_logprobs.detach(), mask)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)  # = −min(ratio·A, clip(ratio)·A)
    if dual_clip:
        dual = (adv < 0) & (per_token > -dual_clip * adv)
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)
    if is_weights is not None:
        _check_same_2d(logprobs=logprobs, is_weights=is_weights)
        per_token = per_token * _masked(is_weights.detach().to(per_token.dtype), mask)
    loss = aggregate(per_token, mask, agg)

    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        adv_full = adv.expand_as(ratio)
        high = (adv_full > 0) & (ratio > 1.0 + clip_high) & mask
        low = (adv_full < 0) & (ratio < 1.0 - clip_low) & mask
        stats = {
            "clip_fraction": ((high | low).sum() / n).item(),
            "clip_fraction_high": (high.sum() / n).item(),
            "clip_fraction_low": (low.sum() / n).item(),
            "approx_kl": (_masked(-log_ratio, mask).sum() / n).item(),
            "ratio_mean": (_masked(ratio, mask).sum() / n).item(),
            "dual_clip_fraction": ((dual & mask).sum() / n).item() if dual_clip else 0.0,
        }
    return loss, stats


def truncated_is_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Truncated importance weights for tokens drawn by a sampler other than the trained policy:

        w_t = min( exp(logp_old − logp_sampler),  C )

    π_old is the trainer's own policy before the update and π_sampler what actually drew the
    token (an int8 or bf16 copy, another engine): the policy gradient is taken under π_old, so
    each token is re-weighted by how much likelier π_old found it, capped at C to bound the
    variance. 1 off the mask.
    """
    _check_same_2d(old_logprobs=old_logprobs, sampler_logprobs=sampler_logprobs, mask=mask)
    if not cap > 0:
        raise ValueError(f"train.tis_cap must be > 0, got {cap!r}")
    mask = mask.bool()
    log_w = _masked(old_logprobs.detach() - sampler_logprobs.detach(), mask)
    return torch.exp(log_w).clamp(max=cap)


def expert_nll(logprobs: Tensor, expert_mask: Tensor) -> Tensor:
    """The SFT loss's numerator on the expert's tokens (the caller divides by N_e, the expert
    tokens of the whole minibatch, so micro-batches add up to its token mean):

        Σ_{b,t} −log π_θ(a_{b,t} | s_{b,t}) · e_{b,t}

    e = 1 where an expert wrote the target token. Masked positions never count, whatever
    they hold.
    """
    _check_same_2d(logprobs=logprobs, expert_mask=expert_mask)
    return -_masked(logprobs, expert_mask.bool()).sum()


# --- KL to a reference policy -----------------------------------------------------------------

KLEstimator = Callable[[Tensor, Tensor], Tensor]
KL_PENALTIES: Registry[KLEstimator] = Registry("KL penalty")


@KL_PENALTIES.register("k1")
def _k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 = log π(x) − log π_ref(x)  (unbiased for KL(π‖π_ref), high variance, can be < 0)."""
    return logprobs - ref_logprobs


@KL_PENALTIES.register("k3")
def _k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 = exp(log r) − log r − 1 with log r = log π_ref − log π  (Schulman; unbiased, ≥ 0)."""
    log_r = ref_logprobs - logprobs
    return torch.exp(log_r) - log_r - 1.0


@KL_PENALTIES.register("none")
def _no_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """No KL penalty: zeros."""
    return torch.zeros_like(logprobs)


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kind: str) -> Tensor:
    """Per-token KL estimate [B, T] of kind "k1", "k3" or "none" (see `KL_PENALTIES`)."""
    fn = KL_PENALTIES.get(kind)
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {list(logprobs.shape)} and ref_logprobs {list(ref_logprobs.shape)} "
            "must have the same shape"
        )
    return fn(logprobs, ref_logprobs)


# --- the whole policy loss --------------------------------------------------------------------


@dataclass(frozen=True)
class PPOLoss:
    """The loss a PPO update minimises, every term of it in this one place:

        L      = L_clip + β · L_KL − α · H
        L_clip = aggregate( w_t · ℓ_t )                ℓ_t from `ppo_clip_loss`, ratio = π/π_old:
                 ℓ_t = −min( ratio·A,  clip(ratio, 1 − ε_low, 1 + ε_high)·A ),
                 capped at c·|A| where A < 0                    (dual-clip, when c > 1)
        L_KL   = aggregate( k(logp_t, logp_ref_t) )    k = k1 or k3 (`KL_PENALTIES`)
        H      = aggregate( H_t )                      H_t = entropy of π(· | prefix) at token t

    ε_low / ε_high = clip_low / clip_high (DAPO's clip-higher), c = dual_clip (0 = off),
    β = kl_coef, α = entropy_coef; `aggregate` is `agg` ("token-mean", "seq-mean-token-mean",
    "seq-mean-token-sum") over the action tokens, the same for all three terms. With
    kl = "none" there is no KL term (and no reference policy is needed); the α·H term is left
    out of the graph when α = 0, but H is always reported.

    Gradients reach logp through the ratio and through k, and reach H when the caller built H
    with a graph; π_old, A, the importance weights w and π_ref are constants.
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float = 0.0
    kl: str = "none"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    agg: str = "token-mean"

    @classmethod
    def from_config(cls, train: TrainConfig) -> PPOLoss:
        """The loss `train.*` configures (clip_low, clip_high, dual_clip, kl, kl_coef, entropy_coef, loss_agg)."""
        return cls(clip_low=train.clip_low, clip_high=train.clip_high, dual_clip=train.dual_clip, kl=train.kl,
                   kl_coef=train.kl_coef, entropy_coef=train.entropy_coef, agg=train.loss_agg)

    def __call__(
        self,
        logprobs: Tensor,
        old_logprobs: Tensor,
        advantages: Tensor,
        mask: Tensor,
        entropy: Tensor,
        ref_logprobs: Tensor | None = None,
        is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """L for one batch [B, T] (`advantages` [B] or [B, T]), and its stats: those of
        `ppo_clip_loss` plus loss = L, entropy = H and ref_kl = L_KL (0 without a KL term)."""
        loss, stats = ppo_clip_loss(
            logprobs, old_logprobs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            agg=self.agg, is_weights=is_weights, dual_clip=self.dual_clip,
        )
        mean_entropy = aggregate(entropy, mask, self.agg)
        if self.entropy_coef:
            loss = loss - self.entropy_coef * mean_entropy
        ref_kl = 0.0
        if self.kl != "none":
            if ref_logprobs is None:
                raise ValueError(f"a {self.kl!r} KL penalty needs ref_logprobs")
            kl = aggregate(kl_penalty(logprobs, ref_logprobs, self.kl), mask, self.agg)
            loss = loss + self.kl_coef * kl
            ref_kl = kl.item()
        return loss, {**stats, "loss": loss.item(), "entropy": mean_entropy.item(), "ref_kl": ref_kl}



def _check_same_2d(**tensors: Tensor) -> None:
    names = list(tensors)
    first = tensors[names[0]]
    if first.dim() != 2:
        raise ValueError(f"{names[0]} must be 2-D [B, T], got shape {list(first.shape)}")
    for name in names[1:]:
        if tensors[name].shape != first.shape:
            raise ValueError(
                f"{name} has shape {list(tensors[name].shape)} but {names[0]} has "
                f"{list(first.shape)}; expected the same [B, T]"
            )
