"""Attention without copying the shared KV heads, on a CPU.

SmolLM2 uses grouped-query attention: 9 query heads share 3 key/value heads. Whenever a mask
is given — every turn of a rollout, whose rows have different lengths, and every padded
update — transformers' "sdpa" first copies each layer's keys and values out to all 9 heads
(`repeat_kv`). PyTorch's CPU kernel takes the groups itself (`enable_gqa`), so on a CPU the
copies are pure waste: without them a 20 Questions evaluation spent 20 % less time per
generated token on a 2-core AVX2 CPU (benchmarks/gqa-attention-cpu.md). On other devices a
masked GQA call falls back to the slow math kernel, so there every call goes to transformers'
own sdpa unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CPU_GQA_SDPA", "TreeLayout", "use_cpu_gqa_attention"]

#: the name the attention function and its mask builder are registered under in transformers
CPU_GQA_SDPA = "sdpa_cpu_gqa"


class TreeLayout:
    """Where each segment of a packed prefix tree (`turncredit.policy.scoring.prefix_tree`)
    attends: its own tokens causally and all of its ancestors' tokens. Attention then runs
    segment by segment on exactly those keys, instead of over a dense tokens × tokens mask
    that is mostly empty (a token sees its own row, ~15 % of a packed micro-batch).

    `spans[s]` is segment s's [start, end) in the packed sequence; `ancestors[s]` the packed
    indices of its ancestors' tokens, ascending (empty for a root)."""

    def __init__(self, spans: list[tuple[int, int]], ancestors: list[torch.Tensor], device: torch.device | str) -> None:
        self.spans = spans
        # a segment's queries see every ancestor key and the segment's own keys up to their own
        self.keys = [torch.cat([a, torch.arange(s, e)]).to(device) if len(a) else None
                     for a, (s, e) in zip(ancestors, spans)]
        self.masks = [torch.cat([torch.ones((e - s, len(a)), dtype=torch.bool),
                                 torch.ones((e - s, e - s), dtype=torch.bool).tril()], dim=1).to(device) if len(a) else None
                      for a, (s, e) in zip(ancestors, spans)]

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None) -> torch.Tensor:
        """[batch 1, heads, tokens, dim] in, [1, tokens, heads, dim] out (transformers' layout)."""
        gqa, outs = key.shape[1] != query.shape[1], []
        for (s, e), keys, mask in zip(self.spans, self.keys, self.masks):
            if keys is None:  # a root: plain causal attention within the segment
                k, v = key[:, :, s:e], value[:, :, s:e]
            else:
                k, v = key.index_select(2, keys), value.index_select(2, keys)
            outs.append(torch.nn.functional.scaled_dot_product_attention(
                query[:, :, s:e], k, v, attn_mask=mask, scale=scaling, is_causal=keys is None and e - s > 1,
                enable_gqa=gqa))
        return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


def _sdpa_cpu_gqa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, tree_layout: TreeLayout | None = None,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if tree_layout is not None:
        return tree_layout.attend(query, key, value, scaling), None
    if query.device.type != "cpu" or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    q_len = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=bool(causal and q_len > 1 and attention_mask is None),  # the mask builder skipped a plain causal mask
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(CPU_GQA_SDPA, _sdpa_cpu_gqa)
    AttentionMaskInterface.register(CPU_GQA_SDPA, sdpa_mask)


def use_cpu_gqa_attention(model: Any) -> Any:
    """Switch a model that uses transformers' "sdpa" to the version above (others: unchanged)."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return model
    _register()
    model.set_attn_implementation(CPU_GQA_SDPA)
    return model
