"""Log-probs of the policy's own tokens under the current weights, computed where they matter.

The policy layer's scoring, used by the trainer (old, new and reference log-probs), the SFT
stage, and a reward shaper that reads the policy's beliefs (ΔBelief), none of which import one
another for it. The vocabulary projection is the largest tensor of a forward pass (49k ×
sequence length for SmolLM2), and only action tokens carry loss, so logits are computed at
action positions only. Tokens that several sequences of a batch share as a prefix (the system
prompt of every 20 Questions game, a group's opening, a guided member's borrowed turns) run
through the decoder once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from turncredit.policy.attention import CPU_GQA_SDPA, TreeLayout


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

@dataclass
class PrefixTree:
    """A batch's rows as a radix tree: each segment is a run of positions [start, end) that a
    set of rows share token for token, under a parent segment that holds everything before it.
    `node[b, p]` is the packed index of the token row b has at position p (-1 past its end):
    rows with the same first p+1 tokens share it."""

    rows: list[int]  # a row holding each segment's tokens
    starts: list[int]
    ends: list[int]
    parents: list[int]  # the parent segment's index, -1 for a root
    node: torch.Tensor  # [B, L] long

    @property
    def tokens(self) -> int:
        """Tokens the tree forward runs through the decoder (every shared token once)."""
        return sum(e - s for s, e in zip(self.starts, self.ends))


def prefix_tree(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> PrefixTree:
    """The radix tree of right-padded rows; segments come parents first, in depth-first order."""
    ids, lengths = input_ids.tolist(), attention_mask.sum(1).tolist()
    tree = PrefixTree([], [], [], [], torch.full(input_ids.shape, -1, dtype=torch.long))

    def by_token(rows: list[int], p: int) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for r in rows:
            if lengths[r] > p:
                groups.setdefault(ids[r][p], []).append(r)
        return list(groups.values())

    stack = [(rows, 0, -1) for rows in reversed(by_token(list(range(len(ids))), 0))]
    packed = 0
    while stack:
        rows, start, parent = stack.pop()
        lead, end = rows[0], start + 1  # the rows share the token at `start` (grouped by it)
        stop = min(lengths[r] for r in rows)
        while end < stop and all(ids[r][end] == ids[lead][end] for r in rows):
            end += 1
        tree.rows.append(lead)
        tree.starts.append(start)
        tree.ends.append(end)
        tree.parents.append(parent)
        tree.node[rows, start:end] = torch.arange(packed, packed + end - start)
        packed += end - start
        me = len(tree.rows) - 1
        stack += [(group, end, me) for group in reversed(by_token(rows, end))]
    return tree


@dataclass
class Trunk:
    """A batch's hidden states after the frozen bottom decoder layers (`ActionLogits.trunk`):
    what the update's passes over one micro-batch would otherwise recompute each time."""

    hidden: torch.Tensor  # [1, packed tokens, hidden] along `tree`, or [B, L, hidden] padded
    tree: PrefixTree | None  # the layout `hidden` is in (None: the padded rows)
    layers: int  # how many bottom layers it has been through


class ActionLogits(torch.nn.Module):
    """The policy's logits at the target positions only: decoder, then the output head on the
    rows that carry loss. One module, so that under FSDP it is the root unit whose forward and
    backward hooks gather and reduce the embeddings and the head.

    With `share_prefix`, tokens that several rows share as a prefix go through the decoder
    once: the batch is cut into a radix tree (`prefix_tree`), its tokens are packed into one
    sequence that attends along the tree (`_decoder_inputs`), and each row reads its positions'
    hidden states from the segments that hold them. A step's group shares the game's opening,
    and a guided member its peer's turns up to the takeover: the main job's update forwards
    ~40 % of its padded tokens (benchmarks/prefix-tree-update-cpu.md). The backward pass sums
    the rows' gradients through the shared segments, so logits and gradients are those of the
    full batch (`test_forward.py`). Under activation checkpointing the batch runs padded, as
    it always did.

    With `reuse_frozen` and the bottom layers frozen (`train.trainable_layers`), `trunk` runs a
    batch through them once and `forward(..., trunk=)` starts from there: the update scores a
    micro-batch for π_old and trains on it without running the frozen layers again.
    """

    #: without segment-wise attention the tree runs under one dense tokens × tokens mask: only
    #: up to this many packed tokens (beyond, the plain padded batch)
    dense_tree_tokens = 8192

    def __init__(self, model: torch.nn.Module, share_prefix: bool = True, reuse_frozen: bool = True) -> None:
        super().__init__()
        self.model = model
        self.share_prefix = share_prefix
        self.reuse_frozen = reuse_frozen

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, where: torch.Tensor,
                trunk: Trunk | None = None) -> torch.Tensor:
        core = core_model(self.model)
        head = core.get_output_embeddings()
        tree = self._layout(core, input_ids, attention_mask) if trunk is None else trunk.tree
        inputs = self._decoder_inputs(core, input_ids, attention_mask, tree)
        if trunk is None:
            hidden = core.get_decoder()(**inputs, use_cache=False).last_hidden_state
        else:
            hidden = _run_layers(core.get_decoder(), inputs, trunk.hidden, trunk.layers, None)
        if tree is None:
            return head(hidden[:, :-1][where])
        wanted, inverse = torch.unique(tree.node[:, :-1].to(where.device)[where], return_inverse=True)
        return head(hidden[0][wanted])[inverse]  # one head row per distinct prefix, then per target

    def frozen_layers(self) -> int:
        """How many bottom decoder layers `trunk` may run once per update: the leading layers
        none of whose weights (nor the input embedding's) are trained; 0 when off or none."""
        core = core_model(self.model)
        if not self.reuse_frozen or _checkpointing(core):
            return 0
        decoder = core.get_decoder()
        layers = getattr(decoder, "layers", None)
        if layers is None or not hasattr(decoder, "norm") or _trained(decoder.get_input_embeddings()):
            return 0
        frozen = 0
        while frozen < len(layers) and not _trained(layers[frozen]):
            frozen += 1
        return min(frozen, len(layers) - 1)  # the top layer always runs in `forward`

    def trunk(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Trunk | None:
        """The batch through the frozen bottom layers, laid out as `forward` would lay it out in
        training; None when no layer is frozen. Bitwise the same hidden states as inside a full
        pass under the same autocast (`test_forward.py`)."""
        n = self.frozen_layers()
        if n == 0:
            return None
        core = core_model(self.model)
        # the layout of a training pass: without checkpointing (no trunk then) it is the same as here
        tree = self._layout(core, input_ids, attention_mask)
        inputs = self._decoder_inputs(core, input_ids, attention_mask, tree)
        with torch.no_grad():
            return Trunk(_run_layers(core.get_decoder(), inputs, None, 0, n), tree, n)

    def _layout(self, core: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> PrefixTree | None:
        """The prefix tree to run the batch along, or None for the plain padded batch (no
        sharing, or a dense tree mask would be too large)."""
        if not self._shares(core, input_ids):
            return None
        tree = prefix_tree(input_ids, attention_mask)
        if core.config._attn_implementation != CPU_GQA_SDPA and tree.tokens > self.dense_tree_tokens:
            return None
        return tree

    def _shares(self, core: torch.nn.Module, input_ids: torch.Tensor) -> bool:
        if not self.share_prefix or input_ids.shape[0] < 2:
            return False
        return not (_checkpointing(core) and core.training and torch.is_grad_enabled())

    @staticmethod
    def _decoder_inputs(core: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        tree: PrefixTree | None) -> dict:
        """The decoder's arguments for the padded rows, or for the tree's tokens packed in
        `tree.node`'s order into one sequence (so every linear layer is one large matmul), each
        at its position in its rows, where a token attends to the tokens before it in its own
        segment and to its ancestor segments' tokens, nothing else: through the CPU attention's
        `TreeLayout`, else under one dense mask."""
        if tree is None:
            return {"input_ids": input_ids, "attention_mask": attention_mask}
        device = input_ids.device
        ids = torch.cat([input_ids[r, s:e] for r, s, e in zip(tree.rows, tree.starts, tree.ends)])
        pos = torch.cat([torch.arange(s, e, device=device) for s, e in zip(tree.starts, tree.ends)])
        sizes = [e - s for s, e in zip(tree.starts, tree.ends)]
        offsets = [0, *itertools.accumulate(sizes)]
        ancestors: list[torch.Tensor] = []  # per segment: its ancestors' packed token indices, ascending
        for parent in tree.parents:  # parents come first
            ancestors.append(torch.empty(0, dtype=torch.long) if parent < 0 else
                             torch.cat([ancestors[parent], torch.arange(offsets[parent], offsets[parent + 1])]))
        packed = {"input_ids": ids[None], "position_ids": pos[None]}
        if core.config._attn_implementation == CPU_GQA_SDPA:
            layout = TreeLayout(list(zip(offsets[:-1], offsets[1:])), ancestors, device)
            placeholder = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)  # a 4D mask goes through unbuilt
            return {**packed, "attention_mask": placeholder, "tree_layout": layout}
        # elsewhere one dense mask: a token sees its segment's earlier tokens and its ancestors'
        n = offsets[-1]
        seg = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        mask = torch.zeros((n, n), dtype=torch.bool)
        for s, anc in enumerate(ancestors):
            mask[offsets[s]:offsets[s + 1], anc] = True
        mask |= (seg[:, None] == seg[None, :]) & torch.ones((n, n), dtype=torch.bool).tril()
        if core.config._attn_implementation == "eager":  # eager attention adds the mask to its scores
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        return {**packed, "attention_mask": mask[None, None].to(device)}


def _checkpointing(core: torch.nn.Module) -> bool:
    flag = getattr(core, "is_activation_checkpointing", None)  # the older name below
    return bool(flag if flag is not None else getattr(core, "is_gradient_checkpointing", False))


def _trained(module: torch.nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


def _run_layers(decoder: torch.nn.Module, inputs: dict, hidden: torch.Tensor | None, start: int,
                stop: int | None) -> torch.Tensor:
    """The decoder's own forward over its layers[start:stop] only: from the embeddings of
    `inputs["input_ids"]` when `hidden` is None, else from `hidden` (the output of layer
    start − 1); the final norm only when the top layer is among them."""
    layers, norm = decoder.layers, decoder.norm
    if hidden is not None:
        inputs = {**{k: v for k, v in inputs.items() if k != "input_ids"}, "inputs_embeds": hidden}
    decoder.layers = torch.nn.ModuleList(list(layers)[start:stop])
    if stop is not None:
        decoder.norm = torch.nn.Identity()
    try:
        return decoder(**inputs, use_cache=False).last_hidden_state
    finally:
        decoder.layers, decoder.norm = layers, norm


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
    trunk: Trunk | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(token_{p+1} | prefix) at every target position, 0 elsewhere; [B, L-1].

    `model` is a causal LM or the `ActionLogits` around it (the trainer's, possibly sharded).
    Logits are divided by the sampling temperature, so these are log-probs of the distribution
    the sampler drew from (verl's convention). `trunk`: the batch's output of the frozen
    layers (`ActionLogits.trunk`), to start from there.
    """
    scorer = model if isinstance(model, ActionLogits) else ActionLogits(model)
    device = model_device(scorer)
    input_ids = batch.input_ids.to(device)
    where = batch.targets.to(device).bool()
    logits = scorer(input_ids, batch.attention_mask.to(device), where, trunk=trunk).float() / temperature
    logp_sel = token_logprobs(logits, input_ids[:, 1:][where])
    logp = torch.zeros(where.shape, dtype=torch.float32, device=device).masked_scatter(where, logp_sel)
    ent = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = torch.zeros_like(logp).masked_scatter(where, entropy_from_logits(logits))
    return logp, ent
