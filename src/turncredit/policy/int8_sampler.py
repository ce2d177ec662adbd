"""An int8 copy of the policy to sample from on a CPU, re-quantised from the trainer's weights.

Why: batched decode of a small model on a CPU streams every weight once per step, so it is bound
by bytes, not FLOPs. On SmolLM2-135M at batch 32 (2 cores), fbgemm's int8 linear (weights per
output channel, activations quantised per call) runs the decode shapes 1.4-7.7× faster than
fp32 `mm` with AVX512-VNNI kernels and 1.1-4.4× with AVX2 ones, and the peer workload's rollout
1.95× / 1.66× faster (benchmarks/sampler-int8-cpu.md).
The price: one activation scale per call is coarse for this model's outlier activations, so
the copy is a different policy: mean |Δ log p| 0.12 nats a token (max ~4) on the SFT
questioner's own games, ~2 nats on the untrained model's T = 1 babble, the error spread over
every layer. The trainer logs that gap and corrects the policy gradient with truncated
importance sampling (`train.tis`). Opt-in: one 20 Questions run sampled from it collapsed as
the gap grew to ~0.4 nats (benchmarks/sampler-int8-cpu.md).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from turncredit.policy.loading import exported_weights

__all__ = ["int8_copy", "refresh_int8", "quantized_linears"]

#: per-output-channel weight scales (one scale per matrix measured no closer)
QCONFIG = torch.ao.quantization.per_channel_dynamic_qconfig


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _check_cpu(model: nn.Module) -> None:
    device = _device(model)
    if device.type != "cpu":
        raise ValueError(f"rollout.dtype: int8 samples on a CPU (fbgemm kernels); the model is on {device}: "
                         "use bfloat16 or rollout.backend: vllm on a GPU")
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        raise ValueError("rollout.dtype: int8 needs PyTorch's fbgemm int8 kernels (x86 with AVX2); "
                         f"this build has {torch.backends.quantized.supported_engines}")


def quantized_linears(sampler: nn.Module) -> dict[str, nn.Module]:
    """The copy's int8 linear layers by their (plain Hugging Face) module names."""
    qlinear = torch.ao.nn.quantized.dynamic.Linear
    return {name: m for name, m in sampler.named_modules() if isinstance(m, qlinear)}


def int8_copy(model: nn.Module) -> nn.Module:
    """A sampling copy of `model` (LoRA merged in) whose linear layers run in int8."""
    _check_cpu(model)
    torch.backends.quantized.engine = "fbgemm"
    plain = copy.deepcopy(model)
    if hasattr(plain, "merge_and_unload"):  # a PEFT model: sample from the merged weights
        plain = plain.merge_and_unload()
    plain = plain.float().eval().requires_grad_(False)
    with warnings.catch_warnings():  # torch.ao's notice that eager quantisation moves to torchao
        warnings.simplefilter("ignore")
        sampler = torch.ao.quantization.quantize_dynamic(plain, {nn.Linear: QCONFIG}, dtype=torch.qint8)
    return sampler


def _quantize(weight: torch.Tensor) -> torch.Tensor:
    """Per-output-channel qint8, with the same observer `quantize_dynamic` used."""
    observer = QCONFIG.weight()
    observer(weight)
    scales, zero_points = observer.calculate_qparams()
    return torch.quantize_per_channel(weight, scales.double(), zero_points.long(), 0, torch.qint8)


@torch.no_grad()
def refresh_int8(sampler: nn.Module, model: nn.Module) -> None:
    """Re-quantise the copy's linear layers and copy its float weights from `model`'s current
    weights (LoRA merged), by name: what an update changed reaches the sampler."""
    weights = exported_weights(model)[1]
    for name, layer in quantized_linears(sampler).items():
        w = weights[f"{name}.weight"].float()
        bias = weights.get(f"{name}.bias")
        layer.set_weight_bias(_quantize(w), None if bias is None else bias.float())
    for name, p in sampler.named_parameters():  # embeddings and norms stay float
        p.copy_(weights[name])
