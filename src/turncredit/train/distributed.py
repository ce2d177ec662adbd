"""Data-parallel training over the processes of an `accelerate launch` (or `torchrun`).

Each rank rolls out its share of the step's task groups (group j on rank j mod world), then
all ranks exchange the episodes, so shaping, advantages and filtering see whole groups and give
the same result everywhere. Each rank trains on its own groups; after every minibatch the
gradients are summed over ranks (one all-reduce of a flat buffer, like DDP's buckets) with each
micro-batch weighted by its share of the *global* minibatch, so the step equals a single
process training on all episodes. Only rank 0 writes run files and checkpoints.

The process group comes from accelerate's `PartialState` (gloo on CPU, nccl on GPU; multi-node
through accelerate's launcher); one process without a launcher is the world of one.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch


class DataParallel:
    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = 0
        if self.world > 1:
            from accelerate import PartialState

            # reads the launcher's environment and creates the process group (gloo on CPU)
            cpu = not torch.cuda.is_available()
            state = PartialState(cpu=cpu, **({"backend": "gloo"} if cpu else {}))
            self.rank, self.world = state.process_index, state.num_processes
            if state.device.type == "cuda":
                torch.cuda.set_device(state.device)  # "auto" then places the model on this rank's GPU

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def my_groups(self, n_groups: int) -> list[int]:
        return list(range(self.rank, n_groups, self.world))

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def sum_floats(self, values: Sequence[float]) -> list[float]:
        if not self.enabled:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """grad ← Σ_ranks grad, for every parameter (a missing grad counts as zeros)."""
        if not self.enabled:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        torch.distributed.all_reduce(flat)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.dtype)
            offset += n

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()
