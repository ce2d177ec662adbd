"""Generation backends for the rollout engine, behind one small stateful interface.

A rollout opens a `GenerationState` for a batch of episodes and, each turn, hands it the new
tokens of each active row (the opening prompt on turn 0, the bridged reply afterwards); the state
appends them and samples the row's next action. What a backend keeps between turns is its own
business: `KVCacheBackend` keeps the whole batch's KV cache, so a turn costs only its new tokens;
`RecomputeBackend` re-prefills each row's history every turn (the usual naive loop, kept as the
reference the fast one is tested against).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from turncredit.generation import Generation, GenerationState, PolicyBackend, SamplingParams  # noqa: F401  (re-exported)
from turncredit.policy.kv_cache import cache_kwarg, drop_holes, growing_cache, keep_columns
from turncredit.registry import Registry


def sample_next(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from softmax(logits / T), cut to the top-k tokens and then to the
    top-p nucleus of what is left (the order of HF's warpers and vLLM's sampler).

    Returns the tokens and their log-probs under that (renormalised) sampling distribution.
    """
    logits = logits.float()
    if params.greedy:
        tok = logits.argmax(dim=-1)
        return tok, torch.log_softmax(logits, -1).gather(-1, tok[:, None]).squeeze(-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if 0 < params.top_k < probs.shape[-1]:
        kth = probs.topk(params.top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if params.top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= params.top_p  # mass before this token ≥ p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    tok = _inverse_cdf_draw(probs, gen)
    return tok, probs.gather(-1, tok[:, None]).squeeze(-1).log()


def _inverse_cdf_draw(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Token i is drawn when u·Z falls in [F(i-1), F(i)), F the running sum of probs, Z = F(V-1).

    Same distribution as `torch.multinomial`, which draws one exponential per vocabulary entry
    (~45 ms for 32 × 49k on two cores); this draws one uniform per row.
    """
    cdf = probs.double().cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=gen, device=probs.device, dtype=torch.float64) * cdf[:, -1:]
    tok = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    # never land on a zero-probability entry (u·Z rounds to the very top or onto a flat step)
    tok = tok.clamp(max=probs.shape[-1] - 1)
    bad = probs.gather(-1, tok[:, None]).squeeze(-1) <= 0
    if bool(bad.any()):
        tok[bad] = probs[bad].argmax(-1)
    return tok


class KVCacheBackend:
    """One KV cache per batch, kept across turns; finished episodes leave the batch.

    Rows of different lengths share the cache's sequence axis: each turn's new tokens are
    left-padded to a common width, so padding sits as masked "holes" inside a row, and every
    token gets its true position id, so the logits equal those of the unpadded sequence. When
    holes make up a fifth of the cache (`hole_ratio`), a turn starts by moving each row's tokens
    together (`drop_holes`), so attention stops reading them.

    Within a turn, once at most `1 / compact_ratio` of the decoding rows are still writing their
    action, those rows go on in a smaller batch of their own (their cache rows copied out,
    unused columns dropped) and their new columns are written back when the turn ends: a row
    that has finished its action stops costing a forward row per token. At T = 1 a few long
    actions otherwise keep the whole batch decoding for most of the turn.

    Likewise a turn's prompts: one long reply (20 Questions' "Invalid question." hint) would pad
    every row's prefill to its length. The rows whose prompts are longer than the width that
    minimises the padded tokens first feed their extra head in a batch of their own.
    """

    #: decode alone once the rows still generating are at most 1/compact_ratio of the batch (0 = never)
    compact_ratio = 2
    #: never split off a batch smaller than this parent (copying the cache would cost more)
    compact_min_rows = 4
    #: at a turn's start, drop the holes once the cache is this many times the fullest row's
    #: tokens (0 = never): attention reads every column, holes included, at every step
    hole_ratio = 1.25
    #: feed the head of a turn's few long prompts (an oracle's long reply) in a batch of their own
    #: when that leaves at most this fraction of the padded prefill (0 = never)
    prefill_split_ratio = 0.75

    def __init__(self, model: torch.nn.Module, end_of_turn_id: int, pad_token_id: int) -> None:
        self.model = model
        self.eot = end_of_turn_id
        self.pad = pad_token_id
        self.cache_kwarg = cache_kwarg(model)

    def start(self, n_rows: int, seed: int) -> "_KVState":
        return _KVState(self, n_rows, seed)


@dataclass
class _Rows:
    """Rows that go through the model together: their KV cache, attention mask and next positions."""

    cache: Any
    mask: torch.Tensor  # (rows, columns): 1 where a cache column holds one of the row's tokens
    next_pos: torch.Tensor  # (rows,): the position id of each row's next token

    def forward(self, backend: KVCacheBackend, ids: torch.Tensor, new_mask: torch.Tensor) -> torch.Tensor:
        """Append `ids` (masked by `new_mask`) to every row; the last column's logits."""
        pos = self.next_pos[:, None] + new_mask.cumsum(-1) - 1
        pos = pos.clamp(min=0) * new_mask
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        out = backend.model(input_ids=ids, attention_mask=self.mask, position_ids=pos,
                            use_cache=True, logits_to_keep=1, **{backend.cache_kwarg: self.cache})
        self.cache = getattr(out, backend.cache_kwarg)
        self.next_pos = self.next_pos + new_mask.sum(-1)
        return out.logits[:, -1]

    def split_off(self, index: torch.Tensor) -> "_Rows":
        """A new batch of the rows at `index`, their cache copied without the columns none of them uses."""
        mask = self.mask[index]
        cols = mask.any(dim=0).nonzero().squeeze(-1)
        cache = growing_cache()
        for i, layer in enumerate(self.cache.layers):
            cache.update(layer.keys[index][:, :, cols], layer.values[index][:, :, cols], i)
        return _Rows(cache, mask[:, cols], self.next_pos[index].clone())

    def take_in(self, child: "_Rows", index: torch.Tensor) -> None:
        """Rows `index` (empty) take `child`'s cache, right-aligned; the batch widens if it is narrower."""
        n, width = self.mask.shape
        extra = max(0, child.mask.shape[1] - width)
        for i, small in enumerate(child.cache.layers):
            if extra:  # holes for every row (creates the layer if the batch had none yet)
                _, heads, _, dim = small.keys.shape
                self.cache.update(small.keys.new_zeros((n, heads, extra, dim)),
                                  small.values.new_zeros((n, heads, extra, small.values.shape[-1])), i)
            self.cache.layers[i].write_rows(index, small.keys, small.values)
        self.mask = torch.cat([self.mask, self.mask.new_zeros((n, extra))], dim=1)
        self.mask[index] = 0
        self.mask[index, self.mask.shape[1] - child.mask.shape[1]:] = child.mask
        self.next_pos[index] = child.next_pos

    def take_back(self, child: "_Rows", index: torch.Tensor, born_with: int) -> None:
        """Append the columns `child` (split off at `index` with `born_with` columns) wrote since;
        the other rows get holes there."""
        m = child.mask.shape[1] - born_with
        if m <= 0:
            return
        n = self.mask.shape[0]
        for layer, small in zip(self.cache.layers, child.cache.layers):
            _, heads, _, dim = small.keys.shape
            k = small.keys.new_zeros((n, heads, m, dim))
            v = small.values.new_zeros((n, heads, m, small.values.shape[-1]))
            k[index], v[index] = small.keys[:, :, -m:], small.values[:, :, -m:]
            layer.update(k, v)
        new_mask = self.mask.new_zeros((n, m))
        new_mask[index] = child.mask[:, -m:]
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        self.next_pos[index] = child.next_pos


class _KVState:
    """The batch's rows: `slot` maps a row id to its index in the batch tensors. Rows that
    finish free their index; rows added later (`add_rows`) take freed indices first, and the
    batch is compacted only at the next turn if some stay free, so a finished episode replaced by
    a waiting one costs no copy of the cache."""

    def __init__(self, backend: KVCacheBackend, n_rows: int, seed: int) -> None:
        self.b = backend
        self.device = next(backend.model.parameters()).device
        self.slot: dict[int, int] = {}  # row id → index in the batch tensors
        self.free: list[int] = []  # indices of finished rows not compacted away yet
        self.fresh: set[int] = set()  # rows with nothing in the cache yet
        self.unfed: dict[int, list[int]] = {}  # sampled, not yet in cache
        self.next_row = 0
        self.rows = self._empty_rows(0)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.tokens_prefilled = 0
        self.add_rows(n_rows)

    def _empty_rows(self, n: int) -> _Rows:
        return _Rows(growing_cache(), torch.zeros((n, 0), dtype=torch.long, device=self.device),
                     torch.zeros(n, dtype=torch.long, device=self.device))

    @property
    def mask(self) -> torch.Tensor:
        return self.rows.mask

    def add_rows(self, n: int) -> list[int]:
        """Open `n` more rows (continuous batching); returns their ids."""
        ids = list(range(self.next_row, self.next_row + n))
        self.next_row += n
        b, grow = self.rows, max(0, n - len(self.free))
        if grow:
            held = b.mask.shape[0]
            for layer in b.cache.layers:
                layer.add_rows(grow)
            b.mask = torch.cat([b.mask, b.mask.new_zeros((grow, b.mask.shape[1]))])
            b.next_pos = torch.cat([b.next_pos, b.next_pos.new_zeros(grow)])
            self.free += range(held, held + grow)
        self.free.sort()
        for r in ids:
            s = self.slot[r] = self.free.pop(0)
            b.mask[s] = 0
            b.next_pos[s] = 0
            self.unfed[r] = []
            self.fresh.add(r)
        return ids

    @torch.no_grad()
    def generate(self, rows: Sequence[int], new_tokens: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        model = self.b.model
        was_training = model.training
        model.eval()
        try:
            return self._generate(rows, new_tokens, params)
        finally:
            model.train(was_training)

    def _prefill_shared_prefix(self, target: _Rows, seqs: list[list[int]]) -> list[list[int]]:
        """Encode the prefix all `seqs` share once into the empty `target` and copy its cache to
        every row; return the rest.

        A step's episodes usually open with the same system prompt, and a GRPO group's members
        with the very same prompt.
        """
        n = len(seqs)
        if n < 2 or target.mask.shape[1]:
            return seqs
        shared = 0
        for column in zip(*seqs):
            if any(t != column[0] for t in column):
                break
            shared += 1
        shared = min(shared, min(len(s) for s in seqs))
        if shared < 2:
            return seqs
        prefix = torch.tensor([seqs[0][:shared]], device=self.device)
        self.b.model(input_ids=prefix, use_cache=True, logits_to_keep=1, **{self.b.cache_kwarg: target.cache})
        target.cache.batch_select_indices(torch.zeros(n, dtype=torch.long, device=self.device))
        target.mask = torch.ones((n, shared), dtype=torch.long, device=self.device)
        target.next_pos = target.next_pos + shared
        self.tokens_prefilled += shared
        return [s[shared:] for s in seqs]

    def _prefill_fresh(self, fresh: list[int], seqs: dict[int, list[int]]) -> None:
        """Encode all but the last new token of each fresh row in a batch of their own (their
        shared opening once), then move that cache into their rows of the batch; what is left
        of `seqs[r]` is the token whose logits sample the row's action with the others."""
        fresh = sorted(fresh, key=self.slot.get)
        child = self._empty_rows(len(fresh))
        rest = self._prefill_shared_prefix(child, [seqs[r][:-1] for r in fresh])
        if max(len(x) for x in rest):
            child.forward(self.b, *self._left_padded(rest))
            self.tokens_prefilled += sum(len(x) for x in rest)
        for r in fresh:
            seqs[r] = seqs[r][-1:]
        index = [self.slot[r] for r in fresh]
        if not self.rows.mask.shape[1] and index == list(range(self.rows.mask.shape[0])):
            self.rows = child  # every row is new: theirs is the batch's cache
        elif child.mask.shape[1]:
            self.rows.take_in(child, torch.tensor(index, device=self.device))

    def _generate(self, rows: Sequence[int], new_tokens: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        self._compact()
        by_row = {r: self.unfed[r] + list(t) for r, t in zip(rows, new_tokens)}
        fresh = [r for r in rows if r in self.fresh]
        if fresh:
            self.fresh.difference_update(fresh)
            if len(fresh) == len(self.slot) and self.rows.mask.shape[1]:
                self.rows = self._empty_rows(len(self.slot))  # none of the old cache is needed
            self._prefill_fresh(fresh, by_row)
        self._drop_holes()
        self._prefill_long_heads(by_row)
        n = len(self.slot)
        by_slot: list[list[int]] = [[] for _ in range(n)]  # rows not generating feed nothing
        for r in rows:
            by_slot[self.slot[r]] = by_row[r]
            self.unfed[r] = []
        self.tokens_prefilled += sum(map(len, by_slot))
        logits = self.rows.forward(self.b, *self._left_padded(by_slot))

        batch = self.rows
        splits: list[tuple[_Rows, torch.Tensor, int]] = []  # (parent, rows split off, columns they began with)
        where = {s: s for s in range(n)}  # slot → row of `batch`
        live = [self.slot[r] for r in rows]  # slots still writing their action
        out_ids: dict[int, list[int]] = {s: [] for s in live}
        out_lp: dict[int, list[float]] = {s: [] for s in live}
        for step in range(params.max_new_tokens):
            at = torch.tensor([where[s] for s in live], device=self.device)
            tok, lp = sample_next(logits[at], params, self.gen)
            nxt = {}
            for s, t, l in zip(live, tok.tolist(), lp.tolist()):
                out_ids[s].append(t)
                out_lp[s].append(l)
                if t != self.b.eot:
                    nxt[s] = t
            if not nxt or step == params.max_new_tokens - 1:
                break
            live = list(nxt)
            size = batch.mask.shape[0]
            ratio, least = self.b.compact_ratio, self.b.compact_min_rows
            if ratio and size >= least and len(live) * ratio <= size:
                index = torch.tensor([where[s] for s in live], device=self.device)
                child = batch.split_off(index)
                splits.append((batch, index, child.mask.shape[1]))
                batch = child
                where = {s: i for i, s in enumerate(live)}
                size = len(live)
            feed = torch.full((size, 1), self.b.pad, dtype=torch.long, device=self.device)
            active = torch.zeros((size, 1), dtype=torch.long, device=self.device)
            for s, t in nxt.items():
                feed[where[s], 0] = t
                active[where[s], 0] = 1
            logits = batch.forward(self.b, feed, active)
        for parent, index, columns in reversed(splits):
            parent.take_back(batch, index, columns)
            batch = parent
        # each action's last token was sampled but not fed: it goes in with the next turn
        for r in rows:
            self.unfed[r] = out_ids[self.slot[r]][-1:]
        return [Generation(out_ids[self.slot[r]], out_lp[self.slot[r]]) for r in rows]

    def _left_padded(self, seqs: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and new-token mask of `seqs`, one row each, left-padded to the longest."""
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), self.b.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, seq in enumerate(seqs):
            if seq:
                ids[j, width - len(seq):] = torch.tensor(seq)
                mask[j, width - len(seq):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _prefill_long_heads(self, seqs: dict[int, list[int]]) -> None:
        """Feed the heads of the longest prompts alone, so that the turn's common forward is
        only as wide as the width `w` minimising its padded tokens: with n rows, lengths ℓ_r
        and the longest L, cost(w) = n·w + |{r: ℓ_r > w}|·(L − w) against n·L unsplit."""
        ratio = self.b.prefill_split_ratio
        if not ratio or not self.rows.mask.shape[1]:
            return
        n, longest = len(self.slot), max(len(s) for s in seqs.values())
        widths = {len(s) for s in seqs.values()} - {0}
        cost, width = min((n * w + sum(len(s) > w for s in seqs.values()) * (longest - w), w) for w in widths)
        if cost > ratio * n * longest:
            return
        long = [r for r, s in seqs.items() if len(s) > width]
        heads = [seqs[r][:len(seqs[r]) - width] for r in long]
        index = torch.tensor([self.slot[r] for r in long], device=self.device)
        child = self.rows.split_off(index)
        born_with = child.mask.shape[1]
        child.forward(self.b, *self._left_padded(heads))
        self.rows.take_back(child, index, born_with)
        self.tokens_prefilled += sum(map(len, heads))
        for r in long:
            seqs[r] = seqs[r][len(seqs[r]) - width:]

    def _drop_holes(self) -> None:
        b, ratio = self.rows, self.b.hole_ratio
        if ratio and b.mask.shape[1] and b.mask.shape[1] >= ratio * int(b.mask.sum(1).max()):
            b.mask = drop_holes(b.cache, b.mask)

    def finish(self, rows: Sequence[int]) -> None:
        for r in rows:
            if r in self.slot:
                self.free.append(self.slot.pop(r))
                self.unfed.pop(r, None)
                self.fresh.discard(r)

    def _compact(self) -> None:
        """Drop the rows finished and not reused, and the columns no remaining row uses."""
        if not self.free:
            return
        self.free = []
        keep_old = sorted(self.slot.values())
        self.slot = {r: keep_old.index(s) for r, s in self.slot.items()}
        keep = torch.tensor(keep_old, dtype=torch.long, device=self.device)
        b = self.rows
        if len(keep):
            b.cache.batch_select_indices(keep)
        b.mask = b.mask[keep]
        b.next_pos = b.next_pos[keep]
        used = b.mask.any(dim=0)
        if len(keep) and not bool(used.all()):
            cols = used.nonzero().squeeze(-1)
            b.mask = b.mask[:, cols]
            keep_columns(b.cache, cols)


class RecomputeBackend:
    """Re-prefill each row's whole history every turn with `transformers`' `generate`."""

    def __init__(self, model: torch.nn.Module, end_of_turn_id: int, pad_token_id: int) -> None:
        self.model = model
        self.eot = end_of_turn_id
        self.pad = pad_token_id

    def start(self, n_rows: int, seed: int) -> "_RecomputeState":
        torch.manual_seed(seed)
        return _RecomputeState(self, n_rows)


class _RecomputeState:
    def __init__(self, backend: RecomputeBackend, n_rows: int) -> None:
        self.b = backend
        self.ctx: dict[int, list[int]] = {r: [] for r in range(n_rows)}
        self.next_row = n_rows
        self.tokens_prefilled = 0

    def add_rows(self, n: int) -> list[int]:
        ids = list(range(self.next_row, self.next_row + n))
        self.next_row += n
        self.ctx.update((r, []) for r in ids)
        return ids

    @torch.no_grad()
    def generate(self, rows: Sequence[int], new_tokens: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        from transformers import GenerationConfig

        for r, t in zip(rows, new_tokens):
            self.ctx[r] += list(t)
        contexts = [self.ctx[r] for r in rows]
        self.tokens_prefilled += sum(len(c) for c in contexts)
        width = max(len(c) for c in contexts)
        ids = torch.full((len(rows), width), self.b.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, c in enumerate(contexts):
            ids[i, width - len(c):] = torch.tensor(c)
            mask[i, width - len(c):] = 1
        sampled = not params.greedy
        cfg = GenerationConfig(
            do_sample=sampled, temperature=params.temperature if sampled else None,
            top_p=params.top_p if sampled else None, top_k=params.top_k if sampled else None,
            max_new_tokens=params.max_new_tokens, eos_token_id=self.b.eot, pad_token_id=self.b.pad,
        )
        model = self.b.model
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=cfg,
                                 output_scores=True, return_dict_in_generate=True)
        finally:
            model.train(was_training)
        new = out.sequences[:, width:].cpu()
        picked = torch.stack([torch.log_softmax(s.float(), dim=-1).gather(-1, new[:, t:t + 1].to(s.device)).squeeze(-1).cpu()
                              for t, s in enumerate(out.scores)], dim=1)
        results = []
        for i, r in enumerate(rows):
            toks = new[i].tolist()
            if self.b.eot in toks:
                toks = toks[: toks.index(self.b.eot) + 1]
            self.ctx[r] += toks
            results.append(Generation(toks, picked[i, : len(toks)].tolist()))
        return results

    def finish(self, rows: Sequence[int]) -> None:
        for r in rows:
            self.ctx.pop(r, None)


BACKENDS: Registry[type] = Registry("generation backend")
BACKENDS.register("kv")(KVCacheBackend)
BACKENDS.register("recompute")(RecomputeBackend)
