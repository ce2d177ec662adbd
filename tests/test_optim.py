"""The shared AdamW: fused where the kernel exists, the same update as PyTorch's default."""

from __future__ import annotations

import torch

from turncredit.train.optim import adamw


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(17, 5, generator=g)), torch.nn.Parameter(torch.randn(3, generator=g))]


def test_fused_adamw_takes_the_steps_the_default_adamw_takes():
    fused, plain = _params(0), _params(0)
    a = adamw(fused, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    b = torch.optim.AdamW(plain, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    assert a.defaults["fused"] and not b.defaults["fused"]
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p, q in zip(fused, plain):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        a.step()
        b.step()
    for p, q, start in zip(fused, plain, _params(0)):
        assert (p - start).abs().max() > 1e-2  # it moved
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)
    # and the state a checkpoint saves loads into the default optimizer (resume across versions)
    b.load_state_dict(a.state_dict())


def test_no_fused_kernel_off_cpu_and_cuda_or_for_integer_tensors():
    on_meta = [torch.nn.Parameter(torch.empty(4, device="meta"))]
    assert not adamw(on_meta, lr=1e-3).defaults["fused"]
    assert not adamw([torch.nn.Parameter(torch.zeros(4), requires_grad=True), torch.zeros(2, dtype=torch.long)],
                     lr=1e-3).defaults.get("fused")
