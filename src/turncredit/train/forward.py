"""Training batches from episodes: each turn's advantage on that turn's action tokens.

Scoring (log-probs at the action positions, the shared opening run once) is the policy layer's:
`turncredit.policy.scoring`.
"""

from __future__ import annotations

import math

import torch

from turncredit.episode import Episode
from turncredit.policy.scoring import TokenBatch, core_model, pack


def episodes_to_batch(episodes: list[Episode], pad_id: int) -> TokenBatch:
    """Broadcast each turn's advantage over that turn's action tokens, then pad on the right."""
    advs, lps = [], []
    for ep in episodes:
        adv, lp = [], []
        for i, t in enumerate(ep.turns):
            if t.advantage is None:  # a run that skipped the credit stage must not train on zeros
                raise ValueError(f"episode {ep.group_id!r} turn {i}: no advantage; the credit stage "
                                 "(turncredit.credit.assign_advantages) sets one on every turn")
            a = float(t.advantage)
            adv += [0.0] * len(t.prompt_ids) + [a] * len(t.action_ids)
            # an expert's action has no sampler log-probs: NaN, read as "π_old itself" by the update
            lp += [0.0] * len(t.prompt_ids) + (list(t.sampler_logprobs) if ep.sampled(i) else [math.nan] * len(t.action_ids))
        advs.append(adv)
        lps.append(lp)
    return pack([ep.token_ids() for ep in episodes], [ep.action_mask() for ep in episodes],
                pad_id, advs, lps)


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer in the backward pass (training mode only, so rollouts and
    no-grad scoring are untouched). Non-reentrant: correct with frozen embeddings (LoRA)."""
    core = core_model(model)
    if not getattr(core, "supports_gradient_checkpointing", False):
        raise ValueError(f"train.activation_checkpointing: {type(core).__name__} does not support it")
    enable = getattr(core, "activation_checkpointing_enable", None) or core.gradient_checkpointing_enable
    enable({"use_reentrant": False})


def train_top_layers(model: torch.nn.Module, n: int, option: str = "train.trainable_layers") -> None:
    """Freeze every weight but the top `n` decoder layers and the final norm (n = 0: leave all
    trainable). Autograd then never enters the frozen layers: the backward pass ends at the
    first trainable one, and the frozen part keeps no activations for it. With LoRA only the
    adapters of the top layers stay trainable. An output head tied to the input embedding
    stays frozen with it. `option` names the setting in errors."""
    if n < 0:
        raise ValueError(f"{option} must be >= 0 (0 = every layer), got {n}")
    if n == 0:
        return
    core = core_model(model)
    decoder = getattr(core, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"{option}: {type(core).__name__} has no .model.layers to choose from")
    if n > len(layers):
        raise ValueError(f"{option}: {n} > the model's {len(layers)} decoder layers")
    keep = {id(p) for layer in layers[len(layers) - n:] for p in layer.parameters()}
    norm = getattr(decoder, "norm", None)
    if norm is not None:
        keep |= {id(p) for p in norm.parameters()}
    for p in model.parameters():
        if id(p) not in keep:
            p.requires_grad_(False)
