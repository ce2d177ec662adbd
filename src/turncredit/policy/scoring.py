"""Log-probs of the policy's own tokens under the current weights, computed where they matter.

The policy layer's scoring, used by the trainer (old, new and reference log-probs), the SFT
stage, and a reward shaper that reads the policy's beliefs (ΔBelief), none of which import one
another for it. The vocabulary projection is the largest tensor of a forward pass (49k ×
sequence length for SmolLM2), and only action tokens carry loss, so logits are computed at
action positions only. Sequences of a batch that open with the same tokens (the system prompt of
every 20 Questions game: 159 of a demonstration's ~250 tokens) run that opening through the
decoder once.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers.cache_utils import DynamicCache

from turncredit.policy.kv_cache import cache_kwarg


@dataclass
class TokenBatch:
    """Right-padded sequences; `targets[b, p]` marks position p whose *next* token is trained."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    targets: torch.Tensor  # [B, L-1] 0/1 float: loss positions
    advantages: torch.Tensor  # [B, L-1] per-token advantage (0 off the action tokens)
    sampler_logprobs: torch.Tensor  # [B, L-1]

    @property
    def num_tokens(self) -> int:
        return int(self.targets.sum().item())

    @property
    def expert_targets(self) -> torch.Tensor:
        """[B, L-1] bool: target positions whose token an expert wrote, not the sampler (their
        sampler log-prob is NaN: `turncredit.train.forward.episodes_to_batch`)."""
        return self.targets.bool() & torch.isnan(self.sampler_logprobs)

    def to(self, device: torch.device | str) -> "TokenBatch":
        return TokenBatch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))

def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device

def pack(
    seqs: list[list[int]],
    masks: list[list[int]],
    pad_id: int,
    advantages: list[list[float]] | None = None,
    sampler_logprobs: list[list[float]] | None = None,
) -> TokenBatch:
    """Right-pad per-token lists into a batch; position p predicts token p+1, so every
    per-token field is shifted left by one."""
    width = max(len(s) for s in seqs)
    B = len(seqs)
    input_ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    fields = [torch.zeros((B, width)) for _ in range(3)]  # targets, advantages, sampler log-probs
    for b, s in enumerate(seqs):
        n = len(s)
        input_ids[b, :n] = torch.tensor(s, dtype=torch.long)
        attn[b, :n] = 1
        for f, src in zip(fields, (masks, advantages, sampler_logprobs)):
            if src is not None:
                f[b, :n] = torch.tensor(src[b], dtype=torch.float32)
    return TokenBatch(input_ids, attn, *(f[:, 1:] for f in fields))

def core_model(model: torch.nn.Module) -> torch.nn.Module:
    """The underlying causal LM (a peft wrapper's base model, LoRA layers still active)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model

def autocast(enabled: bool) -> contextlib.AbstractContextManager:
    if not enabled:
        return contextlib.nullcontext()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.autocast(device, dtype=torch.bfloat16)

class ActionLogits(torch.nn.Module):
    """The policy's logits at the target positions only: decoder, then the output head on the
    rows that carry loss. One module, so that under FSDP it is the root unit whose forward and
    backward hooks gather and reduce the embeddings and the head.

    When every row opens with the same `min_shared_prefix`+ unpadded tokens, that opening goes
    through the decoder once (batch 1) and its keys and values are broadcast to every row; the
    backward pass sums the rows' gradients through the broadcast, so logits and gradients are
    those of the full batch (`test_forward.py`). Not under activation checkpointing, which
    cannot keep a cache: there the whole batch is recomputed as before.
    """

    min_shared_prefix = 16

    def __init__(self, model: torch.nn.Module, share_prefix: bool = True) -> None:
        super().__init__()
        self.model = model
        self.share_prefix = share_prefix

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        core = core_model(self.model)
        prefix = self._shared_prefix(core, input_ids, attention_mask)
        if prefix:
            hidden = self._decode_with_shared_prefix(core, input_ids, attention_mask, prefix)
        else:
            hidden = core.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return core.get_output_embeddings()(hidden[:, :-1][where])

    def _shared_prefix(self, core: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        """Length of the opening all rows share (0 = do not share)."""
        if not self.share_prefix or input_ids.shape[0] < 2:
            return 0
        checkpointing = getattr(core, "is_activation_checkpointing", None)  # the older name below
        if checkpointing is None:
            checkpointing = getattr(core, "is_gradient_checkpointing", False)
        if checkpointing and core.training and torch.is_grad_enabled():
            return 0
        same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
        n = int(same.long().cumprod(0).sum())
        n = min(n, input_ids.shape[1] - 1)  # every row keeps a token after the opening
        return n if n >= self.min_shared_prefix else 0

    @staticmethod
    def _decode_with_shared_prefix(core: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                   n: int) -> torch.Tensor:
        decoder, (rows, width) = core.get_decoder(), input_ids.shape
        key = cache_kwarg(decoder)
        cache = DynamicCache(config=core.config)
        head = decoder(input_ids=input_ids[:1, :n], use_cache=True, **{key: cache}).last_hidden_state
        for layer in cache.layers:  # a view per row, no copy; the rest of the forward appends to it
            layer.keys = layer.keys.expand(rows, -1, -1, -1)
            layer.values = layer.values.expand(rows, -1, -1, -1)
        pos = torch.arange(n, width, device=input_ids.device).expand(rows, -1)
        tail = decoder(input_ids=input_ids[:, n:], attention_mask=attention_mask, position_ids=pos,
                       use_cache=True, **{key: cache}).last_hidden_state
        return torch.cat([head.expand(rows, -1, -1), tail], dim=1)

def idle_batch(pad_id: int = 0) -> TokenBatch:
    """The smallest valid batch (two tokens, one target): a forward pass that adds nothing, for
    a rank that must take part in a sharded forward without data of its own."""
    return pack([[pad_id] * 2], [[0, 1]], pad_id)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dim, shape logits.shape[:-1].

        H = −Σ_v p_v log p_v = logsumexp(z) − Σ_v p_v z_v      (p = softmax(z))

    The logsumexp form never takes log of a probability (no log 0), and z is shifted by its
    max first (H is shift-invariant) so large logits do not cancel catastrophically.
    """
    z = logits - logits.max(dim=-1, keepdim=True).values.detach()
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)


def token_logprobs(logits: Tensor, target_ids: Tensor) -> Tensor:
    """log softmax(logits)[target] per position, shape target_ids.shape.

        log p(y) = z_y − logsumexp(z)

    Computed without materialising the [.., V] log-softmax (which autograd would keep alive).
    Half-precision logits are upcast to float32 one row at a time. Positions must already be
    aligned: logits[..., t, :] scores target_ids[..., t].
    """
    if logits.shape[:-1] != target_ids.shape:
        raise ValueError(
            f"logits {list(logits.shape)} must be target_ids {list(target_ids.shape)} plus a "
            "vocabulary dim"
        )
    target_ids = target_ids.long()
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, target_ids.unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(logits, dim=-1)
    rows = []
    for row_logits, row_ids in zip(logits, target_ids):
        row_lp = torch.log_softmax(row_logits.float(), dim=-1)
        rows.append(row_lp.gather(-1, row_ids.unsqueeze(-1)).squeeze(-1))
    return torch.stack(rows)


def action_logprobs(
    model: torch.nn.Module,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(token_{p+1} | prefix) at every target position, 0 elsewhere; [B, L-1].

    `model` is a causal LM or the `ActionLogits` around it (the trainer's, possibly sharded).
    Logits are divided by the sampling temperature, so these are log-probs of the distribution
    the sampler drew from (verl's convention).
    """
    scorer = model if isinstance(model, ActionLogits) else ActionLogits(model)
    device = model_device(scorer)
    input_ids = batch.input_ids.to(device)
    where = batch.targets.to(device).bool()
    logits = scorer(input_ids, batch.attention_mask.to(device), where).float() / temperature
    logp_sel = token_logprobs(logits, input_ids[:, 1:][where])
    logp = torch.zeros(where.shape, dtype=torch.float32, device=device).masked_scatter(where, logp_sel)
    ent = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = torch.zeros_like(logp).masked_scatter(where, entropy_from_logits(logits))
    return logp, ent
