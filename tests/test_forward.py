"""Advantages broadcast to exactly the action tokens, and log-probs match a plain forward pass."""

import torch

from turncredit.episode import Episode, Turn
from turncredit.train.forward import action_logprobs, episodes_to_batch


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
