"""Data-parallel training over the processes of an `accelerate launch` (or `torchrun`).

Each rank rolls out and reward-shapes its share of the step's task groups (group j on rank
j mod world; shapers are group-local), then all ranks exchange the episodes, so advantages and
filtering see whole groups and give the same result everywhere. Each rank trains on its own groups, each micro-batch weighted by
its share of the *global* minibatch, and gradients are summed over ranks, so the step equals a
single process training on all episodes. Only rank 0 writes run files and checkpoints.

Two ways to hold the model (`train.parallel`):

* `ddp`: every rank holds all weights; after each minibatch the gradients are summed with one
  all-reduce of a flat buffer (like DDP's buckets).
* `fsdp`: PyTorch's FSDP2 (`fully_shard`) splits parameters, gradients and optimizer state
  over the ranks, one unit per decoder layer plus the root; gradients are reduce-scattered
  during backward. Rollouts, reward shaping and checkpoint export run inside `full_weights`,
  which gathers the weights once (no collectives per generated token, so ranks may generate
  different lengths); the update pads every rank to the same number of forward passes,
  because each sharded forward is a collective.

The process group comes from accelerate's `PartialState` (gloo on CPU, nccl on GPU; multi-node
through accelerate's launcher); one process without a launcher is the world of one.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

import torch

from turncredit.registry import Registry
from turncredit.policy.scoring import ActionLogits, action_logprobs, core_model, idle_batch

PARALLEL: Registry[type["DataParallel"]] = Registry("train.parallel")


@PARALLEL.register("ddp")
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

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    # -- how the model is held: every rank has all of it

    def wrap(self, model: torch.nn.Module) -> ActionLogits:
        """The module the update runs forward and backward through."""
        return ActionLogits(model)

    @contextlib.contextmanager
    def full_weights(self, scorer: ActionLogits) -> Iterator[None]:
        """Inside, `scorer.model` holds every weight as a plain tensor (here: always)."""
        yield

    def forward_passes(self, n: int) -> int:
        """How many forward passes this rank must run when it has `n` (a replica needs no partner)."""
        return n

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


@PARALLEL.register("fsdp")
class FullyShardedDataParallel(DataParallel):
    def wrap(self, model: torch.nn.Module) -> ActionLogits:
        if not self.enabled:
            return ActionLogits(model)  # one process: nothing to shard
        # every rank must run the same sequence of sharded layer calls (each is a collective): a
        # rank running a shared opening separately would make one more pass than its partners
        scorer = ActionLogits(model, share_prefix=False, reuse_frozen=False)  # its layers' hooks run only through the root
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        layer_classes = set(getattr(core_model(model), "_no_split_modules", None) or ())
        layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
        if not layers:
            raise ValueError(f"train.parallel: fsdp shards one unit per decoder layer, but {type(core_model(model)).__name__} "
                             "names no layer classes (_no_split_modules); use ddp")
        mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (self.world,))
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
        fully_shard(scorer, mesh=mesh, reshard_after_forward=False)  # embeddings, final norm, output head
        for unit in scorer.modules():
            if isinstance(unit, FSDPModule):
                # the loss is already weighted by the global minibatch: sum, do not average
                unit.set_gradient_divide_factor(1.0)
                unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
        with torch.no_grad():  # FSDP needs its first forward through the root unit
            action_logprobs(scorer, idle_batch())
        # a no-grad forward leaves the root gathered; `parameters()` must name the shards, which
        # are what the optimizer updates
        scorer.reshard()
        return scorer

    @contextlib.contextmanager
    def full_weights(self, scorer: ActionLogits) -> Iterator[None]:
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(scorer, FSDPModule):
            yield
            return
        units = [m for m in scorer.modules() if isinstance(m, FSDPModule)]
        scorer.set_reshard_after_forward(False)  # forwards inside must not re-gather (a collective)
        for unit in units:
            unit.unshard()
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()
            scorer.set_reshard_after_forward(True)
            scorer.set_reshard_after_forward(False, recurse=False)

    def forward_passes(self, n: int) -> int:
        """The most any rank runs: each sharded forward gathers weights with every rank."""
        if not self.enabled:
            return n
        t = torch.tensor([n], dtype=torch.int64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return int(t.item())

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Nothing left to do: backward reduce-scattered (summed) each shard's gradient."""


def is_sharded(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value gathered whole on every rank; a plain tensor as it is."""
    return t.full_tensor() if is_sharded(t) else t


def resident_mib(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """MiB this rank holds for the parameters and the optimizer state (its shards under FSDP)."""
    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if is_sharded(t) else t
        return local.numel() * local.element_size()

    tensors = list(module.parameters()) + [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(nbytes(t) for t in tensors) / 2**20


def shard_like(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A whole tensor laid out like `like` (this rank's shard of it when `like` is sharded)."""
    from torch.distributed.tensor import distribute_tensor

    if is_sharded(like):
        return distribute_tensor(t.to(like.device), like.device_mesh, like.placements)
    return t
