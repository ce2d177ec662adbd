"""The in-place KV cache must hold exactly what transformers' concatenating cache holds."""

import torch
from transformers.cache_utils import DynamicLayer

from turncredit.chat import ChatBridge
from turncredit.policy.backends import KVCacheBackend, SamplingParams, _inverse_cdf_draw
from turncredit.policy.kv_cache import GrowingLayer


def _fill(layer, chunks):
    for k, v in chunks:
        out = layer.update(k, v)
    return out


def test_growing_layer_matches_dynamic_layer_through_growth_select_and_column_drop(monkeypatch):
    monkeypatch.setattr(GrowingLayer, "min_capacity", 4)  # force several regrowths
    g = torch.Generator().manual_seed(0)
    chunks = [(torch.randn(3, 2, n, 5, generator=g), torch.randn(3, 2, n, 5, generator=g)) for n in (3, 1, 1, 6, 1)]
    grow, ref = GrowingLayer(), DynamicLayer()
    k, v = _fill(grow, chunks)
    rk, rv = _fill(ref, chunks)
    assert torch.equal(k, rk) and torch.equal(v, rv) and grow.get_seq_length() == 12

    rows = torch.tensor([2, 0])
    grow.batch_select_indices(rows)
    ref.batch_select_indices(rows)
    cols = torch.tensor([0, 2, 3, 7, 11])
    grow.keep_columns(cols)
    assert torch.equal(grow.keys, ref.keys[:, :, cols]) and torch.equal(grow.values, ref.values[:, :, cols])
    # writing after a column drop lands right after the kept columns
    nk, nv = torch.randn(2, 2, 1, 5, generator=g), torch.randn(2, 2, 1, 5, generator=g)
    k, _ = grow.update(nk, nv)
    assert k.shape[-2] == 6 and torch.equal(k[:, :, -1:], nk) and torch.equal(k[:, :, :5], ref.keys[:, :, cols])


def test_inverse_cdf_draw_picks_the_token_whose_cdf_interval_holds_u():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]]).repeat(6, 1)
    g = torch.Generator().manual_seed(7)
    tok = _inverse_cdf_draw(probs, g)
    u = torch.rand(6, 1, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    # F = [0.1, 0.1, 0.7, 1.0]: u < 0.1 → 0, u < 0.7 → 2, else 3 (never the zero-probability 1)
    expected = [0 if x < 0.1 else 2 if x < 0.7 else 3 for x in u.squeeze(-1).tolist()]
    assert tok.tolist() == expected


def test_inverse_cdf_draw_frequencies_follow_the_probabilities():
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3]]).repeat(20000, 1)
    tok = _inverse_cdf_draw(probs, torch.Generator().manual_seed(1))
    freq = torch.bincount(tok, minlength=4).float() / len(tok)
    assert freq[1] == 0
    assert torch.allclose(freq, probs[0], atol=0.015)


def test_the_shared_opening_is_encoded_once(tiny_policy, smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    msgs = [[{"role": "system", "content": "Same rules for all."}, {"role": "user", "content": f"Game {i}"}]
            for i in range(4)]
    ctx = [bridge.opening_ids(m) for m in msgs]
    shared = next(i for i, col in enumerate(zip(*ctx)) if len(set(col)) > 1)
    state = KVCacheBackend(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id).start(4, seed=0)
    state.generate(range(4), ctx, SamplingParams(max_new_tokens=1))
    assert shared > 5
    assert state.tokens_prefilled == shared + sum(len(c) - shared for c in ctx)


def test_drop_holes_moves_each_rows_tokens_right_in_order():
    from transformers.cache_utils import Cache

    from turncredit.policy.kv_cache import drop_holes

    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 0]])
    keys = torch.arange(2 * 4, dtype=torch.float32).view(2, 1, 4, 1)  # row r, column c holds 4r + c
    cache = Cache(layer_class_to_replicate=GrowingLayer)
    cache.update(keys, -keys, 0)
    new = drop_holes(cache, mask)
    assert new.tolist() == [[1, 1, 1], [0, 0, 1]]
    k = cache.layers[0].keys[:, 0, :, 0]
    assert k[0].tolist() == [0.0, 2.0, 3.0] and k[1, -1].item() == 5.0  # row 1's one token, last
    assert torch.equal(cache.layers[0].values, -cache.layers[0].keys)
    k2, _ = cache.layers[0].update(torch.full((2, 1, 1, 1), 9.0), torch.zeros(2, 1, 1, 1))
    assert k2.shape[2] == 4 and k2[:, 0, -1, 0].tolist() == [9.0, 9.0]  # the next token lands after them
