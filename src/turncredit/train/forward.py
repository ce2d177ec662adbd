"""Log-probs of the policy's own tokens under the current weights, computed where they matter.

The vocabulary projection is the largest tensor of a forward pass (49k × sequence length for
SmolLM2), and only action tokens carry loss, so logits are computed at action positions only.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch

from turncredit.episode import Episode
from turncredit.train.loss import entropy_from_logits, token_logprobs


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


def episodes_to_batch(episodes: list[Episode], pad_id: int) -> TokenBatch:
    """Broadcast each turn's advantage over that turn's action tokens, then pad on the right."""
    advs, lps = [], []
    for ep in episodes:
        adv, lp = [], []
        for t in ep.turns:
            a = 0.0 if t.advantage is None else float(t.advantage)
            adv += [0.0] * len(t.prompt_ids) + [a] * len(t.action_ids)
            lp += [0.0] * len(t.prompt_ids) + list(t.sampler_logprobs)
        advs.append(adv)
        lps.append(lp)
    return pack([ep.token_ids() for ep in episodes], [ep.action_mask() for ep in episodes],
                pad_id, advs, lps)


def core_model(model: torch.nn.Module) -> torch.nn.Module:
    """The underlying causal LM (a peft wrapper's base model, LoRA layers still active)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer in the backward pass (training mode only, so rollouts and
    no-grad scoring are untouched). Non-reentrant: correct with frozen embeddings (LoRA)."""
    core = core_model(model)
    if not getattr(core, "supports_gradient_checkpointing", False):
        raise ValueError(f"train.activation_checkpointing: {type(core).__name__} does not support it")
    enable = getattr(core, "activation_checkpointing_enable", None) or core.gradient_checkpointing_enable
    enable({"use_reentrant": False})


def autocast(enabled: bool) -> contextlib.AbstractContextManager:
    if not enabled:
        return contextlib.nullcontext()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.autocast(device, dtype=torch.bfloat16)


class ActionLogits(torch.nn.Module):
    """The policy's logits at the target positions only: decoder, then the output head on the
    rows that carry loss. One module, so that under FSDP it is the root unit whose forward and
    backward hooks gather and reduce the embeddings and the head."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        core = core_model(self.model)
        hidden = core.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1]
        return core.get_output_embeddings()(hidden[where])


def idle_batch(pad_id: int = 0) -> TokenBatch:
    """The smallest valid batch (two tokens, one target): a forward pass that adds nothing, for
    a rank that must take part in a sharded forward without data of its own."""
    return pack([[pad_id] * 2], [[0, 1]], pad_id)


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
