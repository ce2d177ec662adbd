"""Advantages broadcast to exactly the action tokens, and log-probs match a plain forward pass."""

import math

import pytest

import torch

from turncredit.episode import Episode, Turn
from turncredit.policy.scoring import action_logprobs, entropy_from_logits, token_logprobs
from turncredit.policy.loading import tiny_model
from turncredit.train.forward import episodes_to_batch, train_top_layers


def episode():
    return Episode(task={}, group_id="g", messages=[], turns=[
        Turn([5, 6], [7, 8], [-0.1, -0.2], "a", advantage=1.5),
        Turn([9], [10], [-0.3], "b", advantage=-2.0),
    ])


def test_advantage_broadcast_and_shift():
    short = Episode(task={}, group_id="g", messages=[], turns=[Turn([5], [6], [-0.4], "c", advantage=0.5)])
    b = episodes_to_batch([episode(), short], pad_id=0)
    # tokens 5 6 | 7 8 | 9 | 10 ; position p predicts token p+1
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9, 10], [5, 6, 0, 0, 0, 0]]
    assert b.targets.tolist() == [[0, 1, 1, 0, 1], [1, 0, 0, 0, 0]]
    assert b.advantages.tolist() == [[0, 1.5, 1.5, 0, -2.0], [0.5, 0, 0, 0, 0]]
    assert torch.allclose(b.sampler_logprobs[0], torch.tensor([0, -0.1, -0.2, 0, -0.3]))
    assert b.attention_mask.tolist() == [[1] * 6, [1, 1, 0, 0, 0, 0]]


def test_action_logprobs_match_full_log_softmax(tiny_policy):
    ep = episode()
    b = episodes_to_batch([ep], pad_id=0)
    logp, ent = action_logprobs(tiny_policy, b, temperature=2.0, with_entropy=True)
    with torch.no_grad():
        full = torch.log_softmax(tiny_policy(b.input_ids).logits[0, :-1].float() / 2.0, -1)
    ids = b.input_ids[0, 1:]
    for p in range(5):
        want = full[p, ids[p]].item() if b.targets[0, p] else 0.0
        assert abs(logp[0, p].item() - want) < 1e-5
    probs = full.exp()
    want_ent = -(probs * full).sum(-1) * b.targets[0]
    assert torch.allclose(ent[0], want_ent, atol=1e-4)


@pytest.mark.parametrize("attention", ["sdpa_cpu_gqa", "sdpa", "eager"])
def test_shared_prefixes_run_once_and_change_no_logit_or_gradient(smol_tokenizer, attention):
    """Rows as a step's group makes them: one opening, two rows that share a turn more (a guided
    member and its peer), a row identical to another, a row that is a strict prefix of another,
    and right padding. Run as a prefix tree, every shared token goes through the decoder once,
    and the action log-probs and the gradients of every weight equal the plain batch forward's:
    with attention segment by segment (the CPU attention) and with one dense tree mask (others)."""
    from turncredit.policy.scoring import ActionLogits, pack, prefix_tree

    tiny_policy = tiny_model(smol_tokenizer, seed=0)
    tiny_policy.set_attn_implementation(attention)

    g = torch.Generator().manual_seed(0)

    def toks(n: int) -> list[int]:
        return torch.randint(5, 200, (n,), generator=g).tolist()

    opening, turn, x, y, w = toks(20), [7] + toks(5), [8] + toks(6), [9] + toks(3), [10] + toks(8)
    seqs = [opening + turn + x, opening + turn + y, opening + w, opening + turn + x, opening + turn]
    masks = [[0] * 18 + [1] * (len(s) - 18) for s in seqs]  # targets also inside the opening's end
    batch = pack(seqs, masks, pad_id=0)
    tree = prefix_tree(batch.input_ids, batch.attention_mask)
    # segments: opening, the shared turn, x, y, w; parents before children
    assert sorted(e - s for s, e in zip(tree.starts, tree.ends)) == sorted([20, 6, 7, 4, 9])
    assert tree.tokens == 20 + 6 + 7 + 4 + 9
    assert tree.node[0].tolist() == tree.node[3].tolist()  # identical rows read the same tokens
    assert tree.node[4, :26].tolist() == tree.node[0, :26].tolist() and (tree.node[4, 26:] == -1).all()
    assert all(p < i for i, p in enumerate(tree.parents))
    params = [p for p in tiny_policy.parameters() if p.requires_grad]
    embed_rows = []
    hook = tiny_policy.get_input_embeddings().register_forward_hook(lambda m, i, o: embed_rows.append(tuple(i[0].shape)))

    def run(share: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        tiny_policy.zero_grad(set_to_none=True)
        logp, _ = action_logprobs(ActionLogits(tiny_policy, share_prefix=share), batch)
        (logp * torch.linspace(-1, 1, logp.shape[1])).sum().backward()
        return logp.detach(), [p.grad.clone() for p in params]

    try:
        plain, g_plain = run(False)
        assert embed_rows == [(5, 33)]
        embed_rows.clear()
        shared, g_shared = run(True)
        assert sum(n for _, n in embed_rows) == tree.tokens and all(b == 1 for b, _ in embed_rows)
    finally:
        hook.remove()
        tiny_policy.zero_grad(set_to_none=True)
    torch.testing.assert_close(shared, plain, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_shared, g_plain):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attention,share", [("sdpa_cpu_gqa", True), ("sdpa", True), ("sdpa_cpu_gqa", False)])
@pytest.mark.parametrize("bf16", [False, True])
def test_frozen_trunk_runs_once_and_changes_no_logit_or_gradient(smol_tokenizer, attention, share, bf16):
    """With the bottom layers frozen, the update runs a micro-batch through them once
    (`ActionLogits.trunk`) and starts every later pass from there: those passes never enter the
    embedding or the frozen layers, and give bitwise the log-probs and gradients of a full pass,
    along the prefix tree (segment-wise and dense mask) and padded, in fp32 and under bf16
    autocast. Nothing frozen, or the reuse switched off: no trunk."""
    from turncredit.policy.scoring import ActionLogits, autocast, pack

    model = tiny_model(smol_tokenizer, seed=0, num_hidden_layers=4)
    model.set_attn_implementation(attention)
    g = torch.Generator().manual_seed(1)
    opening = torch.randint(5, 200, (12,), generator=g).tolist()
    seqs = [opening + torch.randint(5, 200, (n,), generator=g).tolist() for n in (9, 4, 7)]
    batch = pack(seqs, [[0] * 10 + [1] * (len(s) - 10) for s in seqs], pad_id=0)
    scorer = ActionLogits(model, share_prefix=share)
    assert scorer.trunk(batch.input_ids, batch.attention_mask) is None  # every layer trained
    train_top_layers(model, 1)
    assert scorer.frozen_layers() == 3
    assert ActionLogits(model, reuse_frozen=False).trunk(batch.input_ids, batch.attention_mask) is None
    params = [p for p in model.parameters() if p.requires_grad]
    entered = []
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: entered.append(name))
             for name, m in (("embed", model.get_input_embeddings()), ("layer0", model.model.layers[0]),
                             ("layer2", model.model.layers[2]), ("layer3", model.model.layers[3]))]

    def run(trunk) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        with autocast(bf16):
            logp, _ = action_logprobs(scorer, batch, trunk=trunk)
        (logp * torch.linspace(-1, 1, logp.shape[1])).sum().backward()
        return logp.detach(), [p.grad.clone() for p in params]

    try:
        model.train()
        full, g_full = run(None)
        with torch.no_grad(), autocast(bf16):
            trunk = scorer.trunk(batch.input_ids, batch.attention_mask)
        assert trunk.layers == 3 and (trunk.tree is not None) == share
        entered.clear()
        reused, g_reused = run(trunk)
        assert entered == ["layer3"]  # the top layer only: no embedding, no frozen layer
        assert len(model.model.layers) == 4 and not isinstance(model.model.norm, torch.nn.Identity)
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
    assert torch.equal(reused, full)
    for a, b in zip(g_reused, g_full):
        assert torch.equal(a, b)


def test_entropy_from_logits():
    # uniform over V = 7 → ln 7, for any constant logit (also huge ones)
    assert entropy_from_logits(torch.full((2, 7), 1000.0)).tolist() == pytest.approx(
        [math.log(7)] * 2)
    # logits (0, ln3) → p = (1/4, 3/4): H = ¼ln4 + ¾ln(4/3) ≈ 0.562335
    h = entropy_from_logits(torch.tensor([0.0, math.log(3)]) + 500.0)
    assert h.item() == pytest.approx(0.562335, abs=1e-5)


def test_token_logprobs_matches_log_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g) * 5
    ids = torch.randint(0, 11, (2, 5), generator=g)
    ref = torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids), ref, atol=1e-5)
    # bf16 path upcasts; compare with the fp32 answer on the same (rounded) logits
    lb = logits.bfloat16()
    ref_b = torch.log_softmax(lb.float(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    out_b = token_logprobs(lb, ids)
    assert out_b.dtype == torch.float32 and torch.allclose(out_b, ref_b, atol=1e-5)
    with pytest.raises(ValueError, match="target_ids"):
        token_logprobs(logits, ids[:, :4])


def test_a_turn_without_an_advantage_is_an_error_not_a_zero():
    ep = episode()
    ep.turns[1].advantage = None
    with pytest.raises(ValueError, match="turn 1: no advantage"):
        episodes_to_batch([ep], pad_id=0)


def test_training_only_the_top_layers_freezes_the_rest_and_the_backward_stops_there(smol_tokenizer):
    model = tiny_model(smol_tokenizer, seed=0, num_hidden_layers=3).train()
    train_top_layers(model, 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("model.layers.2.", "model.norm.")) for n in trainable)
    assert any(n.startswith("model.norm.") for n in trainable)
    out = model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.sum()
    out.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n not in trainable)
    assert all(p.grad is not None for n, p in model.named_parameters() if n in trainable)


def test_trainable_layers_out_of_range_is_an_error_naming_the_option(smol_tokenizer):
    model = tiny_model(smol_tokenizer, seed=0)
    with pytest.raises(ValueError, match=r"train.trainable_layers: 3 > the model's 2 decoder layers"):
        train_top_layers(model, 3)
    with pytest.raises(ValueError, match=r"train.trainable_layers must be >= 0"):
        train_top_layers(model, -1)
    train_top_layers(model, 0)
    assert all(p.requires_grad for p in model.parameters())
