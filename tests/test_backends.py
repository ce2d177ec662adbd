"""The KV-cache backend must sample from exactly the distribution a clean forward pass gives."""

import math

import torch

from turncredit.chat import ChatBridge
from turncredit.policy.backends import KVCacheBackend, RecomputeBackend, SamplingParams, _Rows, sample_next
from turncredit.policy.kv_cache import cache_kwarg

MSGS = [[{"role": "system", "content": "You play a game."},
         {"role": "user", "content": "Ask a question" + "!" * i}] for i in range(4)]


def clean_logprobs(model, seq, n):
    """Log-probs of the last n tokens of `seq` from one unpadded forward pass."""
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), -1)
    start = len(seq) - n
    return [lp[start - 1 + j, seq[start + j]].item() for j in range(n)]


def two_turns(backend_cls, model, tok, params, finish_row=None):
    bridge = ChatBridge(tok)
    state = backend_cls(model, bridge.end_of_turn_id, tok.pad_token_id).start(4, seed=0)
    ctx = [bridge.opening_ids(m) for m in MSGS]
    first = state.generate(range(4), ctx, params)
    rows = [r for r in range(4) if r != finish_row]
    if finish_row is not None:
        state.finish([finish_row])
    replies = {r: bridge.reply_ids("No." * (r + 1), first[r].ids[-1] == bridge.end_of_turn_id) for r in rows}
    second = state.generate(rows, [replies[r] for r in rows], params)
    return ctx, first, replies, dict(zip(rows, second))


def test_kv_logprobs_equal_a_clean_forward_after_holes_and_finish(tiny_policy, smol_tokenizer):
    ctx, first, replies, second = two_turns(KVCacheBackend, tiny_policy, smol_tokenizer,
                                            SamplingParams(max_new_tokens=10), finish_row=1)
    assert set(second) == {0, 2, 3}
    for r, gen in second.items():
        seq = ctx[r] + first[r].ids + replies[r] + gen.ids
        ref = clean_logprobs(tiny_policy, seq, len(gen.ids))
        assert max(abs(a - b) for a, b in zip(ref, gen.logprobs)) < 1e-4
        ref1 = clean_logprobs(tiny_policy, ctx[r] + first[r].ids, len(first[r].ids))
        assert max(abs(a - b) for a, b in zip(ref1, first[r].logprobs)) < 1e-4


def test_kv_and_recompute_agree_greedily(tiny_policy, smol_tokenizer):
    p = SamplingParams(max_new_tokens=8, greedy=True)
    _, f1, _, s1 = two_turns(KVCacheBackend, tiny_policy, smol_tokenizer, p)
    _, f2, _, s2 = two_turns(RecomputeBackend, tiny_policy, smol_tokenizer, p)
    assert [g.ids for g in f1] == [g.ids for g in f2]
    assert {r: g.ids for r, g in s1.items()} == {r: g.ids for r, g in s2.items()}


def test_top_p_samples_only_the_nucleus_and_renormalises():
    # probs 0.5, 0.3, 0.15, 0.05: nucleus for p=0.7 is {0, 1} (mass before token 2 is 0.8 ≥ 0.7)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    tok, lp = sample_next(logits, SamplingParams(top_p=0.7), g)
    assert set(tok.tolist()) == {0, 1}
    expected = {0: 0.5 / 0.8, 1: 0.3 / 0.8}
    for t, l in zip(tok.tolist()[:20], lp.tolist()[:20]):
        assert abs(l - torch.log(torch.tensor(expected[t])).item()) < 1e-6
    frac0 = (tok == 0).float().mean().item()
    assert abs(frac0 - 0.625) < 0.05


def test_top_k_cuts_first_then_top_p_cuts_what_is_left():
    # probs 0.5, 0.3, 0.15, 0.05; top-k 3 → 0.5, 0.3, 0.15 renormalised by 0.95
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    tok, lp = sample_next(logits, SamplingParams(top_k=3), torch.Generator().manual_seed(0))
    assert set(tok.tolist()) == {0, 1, 2}
    for t, l in zip(tok.tolist()[:30], lp.tolist()[:30]):
        assert abs(l - math.log([0.5, 0.3, 0.15][t] / 0.95)) < 1e-6
    # the order matters: top-k 2 leaves (0.625, 0.375), and top-p 0.6 then keeps token 0 alone
    # (the mass before token 1 is 0.625 ≥ 0.6); top-p 0.6 first would keep {0, 1}
    tok, lp = sample_next(logits, SamplingParams(top_k=2, top_p=0.6), torch.Generator().manual_seed(0))
    assert set(tok.tolist()) == {0} and lp.abs().max().item() < 1e-6
    tok, _ = sample_next(logits, SamplingParams(top_p=0.6), torch.Generator().manual_seed(0))
    assert set(tok.tolist()) == {0, 1}
    # k ≥ the vocabulary or 0: no cut
    tok, _ = sample_next(logits, SamplingParams(top_k=0), torch.Generator().manual_seed(0))
    assert set(tok.tolist()) == {0, 1, 2, 3}


def test_temperature_scales_logits():
    logits = torch.tensor([[2.0, 0.0]])
    _, lp = sample_next(logits, SamplingParams(temperature=2.0, greedy=False), torch.Generator().manual_seed(1))
    # softmax([1, 0]) = [e/(e+1), 1/(e+1)]
    import math
    assert min(abs(lp.item() - math.log(math.e / (math.e + 1))), abs(lp.item() - math.log(1 / (math.e + 1)))) < 1e-6


class StopsAtPosition(torch.nn.Module):
    """The tiny model, but the end-of-turn token wins once a row's position reaches `stop`:
    rows with prompts of different lengths end their actions at different steps."""

    def __init__(self, model, eot, stop):
        super().__init__()
        self.model, self.eot, self.stop = model, eot, stop

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, **kw):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         **{cache_kwarg(self.model): cache}, **kw)
        last = position_ids[:, -1] if position_ids is not None else torch.full((len(input_ids),), input_ids.shape[1] - 1)
        out.logits[:, -1, self.eot] += 1e4 * (last >= self.stop)
        return out


def test_rows_that_finish_their_action_leave_the_decode_batch_without_changing_anything(tiny_policy, smol_tokenizer,
                                                                                        monkeypatch):
    """Split-off decoding (nested, then written back) samples the same actions with the same
    log-probs, in this turn and the next, as decoding the whole batch."""
    bridge = ChatBridge(smol_tokenizer)
    msgs = [[{"role": "user", "content": "Ask" + " a" * (3 * i)}] for i in range(6)]
    ctx = [bridge.opening_ids(m) for m in msgs]
    eot = bridge.end_of_turn_id
    model = StopsAtPosition(tiny_policy, eot, stop=min(map(len, ctx)) + 10)  # rows end 10, 7, 4, 1, 0, 0 steps in
    p = SamplingParams(max_new_tokens=12)

    sizes = []
    split_off = _Rows.split_off
    monkeypatch.setattr(_Rows, "split_off", lambda self, index: sizes.append(len(index)) or split_off(self, index))

    def run(ratio):
        backend = KVCacheBackend(model, eot, smol_tokenizer.pad_token_id)
        backend.compact_ratio, backend.compact_min_rows = ratio, 2
        state = backend.start(len(ctx), seed=0)
        first = state.generate(range(len(ctx)), ctx, p)
        replies = [bridge.reply_ids("No." * (r + 1), first[r].ids[-1] == eot) for r in range(len(ctx))]
        return first, state.generate(range(len(ctx)), replies, p)

    whole = run(0)
    assert sizes == []
    split = run(1.2)  # 1.2: split off as soon as one row in six is done
    assert sizes[:3] == [4, 3, 2]  # nested: rows 4 and 5 end at once, then 3, 2, 1 one by one
    assert len({len(g.ids) for g in whole[0]}) >= 3  # rows do end at several different steps
    for a, b in zip(whole[0] + whole[1], split[0] + split[1]):
        assert a.ids == b.ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_dropping_the_holes_between_turns_changes_no_sample(tiny_policy, smol_tokenizer):
    """Three turns with rows whose prompts, replies and actions differ in length (holes in the
    cache): with the holes dropped at each turn's start the cache is narrower and every action
    and log-prob is the same as with the holes kept."""
    bridge = ChatBridge(smol_tokenizer)
    msgs = [[{"role": "user", "content": "Ask" + " a" * (3 * i)}] for i in range(5)]
    ctx = [bridge.opening_ids(m) for m in msgs]
    eot = bridge.end_of_turn_id
    model = StopsAtPosition(tiny_policy, eot, stop=min(map(len, ctx)) + 8)
    p = SamplingParams(max_new_tokens=10)

    def run(ratio):
        backend = KVCacheBackend(model, eot, smol_tokenizer.pad_token_id)
        backend.hole_ratio = ratio
        state = backend.start(len(ctx), seed=0)
        turns = [state.generate(range(len(ctx)), ctx, p)]
        for k in range(2):
            replies = [bridge.reply_ids("No." * (1 + (r * (k + 2)) % 4), turns[-1][r].ids[-1] == eot)
                       for r in range(len(ctx))]
            turns.append(state.generate(range(len(ctx)), replies, p))
        return turns, state

    kept, with_holes = run(0)
    dropped, compact = run(1.01)
    assert compact.mask.shape[1] < with_holes.mask.shape[1]
    assert compact.mask.sum(1).tolist() == with_holes.mask.sum(1).tolist()  # the same tokens, fewer columns
    for a, b in zip(sum(kept, []), sum(dropped, [])):
        assert a.ids == b.ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_long_prompts_feed_their_head_apart_without_changing_any_sample(tiny_policy, smol_tokenizer, monkeypatch):
    """One row's long reply per turn: its head goes through the model alone (the common
    forward stays as wide as the short replies), and every action, log-prob and the count of
    tokens prefilled are those of padding all rows to the long reply."""
    bridge = ChatBridge(smol_tokenizer)
    msgs = [[{"role": "user", "content": "Ask" + " a" * i}] for i in range(5)]
    ctx = [bridge.opening_ids(m) for m in msgs]
    eot = bridge.end_of_turn_id
    p = SamplingParams(max_new_tokens=6)
    long_reply = "Invalid question. " + "Ask about its category, one short question. " * 4

    sizes = []
    split_off = _Rows.split_off
    monkeypatch.setattr(_Rows, "split_off", lambda self, index: sizes.append(len(index)) or split_off(self, index))

    def run(ratio):
        backend = KVCacheBackend(tiny_policy, eot, smol_tokenizer.pad_token_id)
        backend.compact_ratio, backend.prefill_split_ratio = 0, ratio
        state = backend.start(len(ctx), seed=0)
        turns = [state.generate(range(len(ctx)), ctx, p)]
        for k in range(2):
            replies = [bridge.reply_ids(long_reply if r == 2 * k else "No.", turns[-1][r].ids[-1] == eot)
                       for r in range(len(ctx))]
            turns.append(state.generate(range(len(ctx)), replies, p))
        return turns, state

    padded, padded_state = run(0)
    assert sizes == []
    apart, apart_state = run(0.75)
    assert sizes == [1, 1]  # one long row a turn, fed alone
    assert apart_state.tokens_prefilled == padded_state.tokens_prefilled
    for a, b in zip(sum(padded, []), sum(apart, [])):
        assert a.ids == b.ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
