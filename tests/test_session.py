"""A bf16 sampling copy must follow the trained weights after every update."""

import copy

import torch

from turncredit.policy.session import PolicySession


def test_bf16_sampler_copy_is_refreshed_after_an_update(tiny_policy, smol_tokenizer):
    model = copy.deepcopy(tiny_policy)
    session = PolicySession.from_model(model, smol_tokenizer, sampler_dtype="bfloat16")
    sampler = session.sampler_model
    assert session.samples_from_a_copy  # so the trainer refreshes it (under FSDP: gathers for it)
    assert session.backend.model is sampler and sampler is not model
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in sampler.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    before = [p.clone() for p in sampler.parameters()]
    session.after_update()
    for dst, src, old in zip(sampler.parameters(), model.parameters(), before):
        assert torch.equal(dst, src.to(torch.bfloat16))
        assert not torch.equal(dst, old)


def test_without_a_sampler_dtype_the_backend_samples_with_the_model(tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    assert session.sampler_model is None and session.backend.model is tiny_policy
    assert not session.samples_from_a_copy  # nothing to refresh: no gather after each update
