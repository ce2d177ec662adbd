"""The optimizer the trainer and SFT share: AdamW, fused where PyTorch has the kernel.

PyTorch's default AdamW (`foreach`) steps through lists of whole-model temporaries: on a 2-core
CPU with SmolLM2-135M a step took ~1.0 s and briefly held ~0.5 GB beyond the weights, gradients
and moments; the fused kernel updates each element in one pass, ~0.2 s and no temporaries
(benchmarks/update-memory-cpu.md). Same update rule; the results agree to float rounding.
"""

from __future__ import annotations

from typing import Iterable

import torch

__all__ = ["adamw"]


def _fusable(params: list[torch.Tensor]) -> bool:
    """Plain float tensors on one CPU or CUDA device (not FSDP's sharded DTensors)."""
    if not params:
        return False
    devices = {p.device.type for p in params}
    return (len(devices) == 1 and devices <= {"cpu", "cuda"}
            and all(type(p.data) is torch.Tensor and p.is_floating_point() for p in params))


def adamw(params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
          weight_decay: float = 0.01) -> torch.optim.AdamW:
    params = list(params)
    fused = {"fused": True} if _fusable(params) else {}
    return torch.optim.AdamW(params, lr=lr, betas=tuple(betas), weight_decay=weight_decay, **fused)
