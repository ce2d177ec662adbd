"""The int8 sampling copy: close to the trained policy, and re-quantised from it after updates."""

import copy

import pytest
import torch

from turncredit.policy.int8_sampler import int8_copy, quantized_linears, refresh_int8
from turncredit.policy.session import PolicySession

IDS = torch.tensor([[1, 5, 9, 42, 7, 3, 11, 2]])


def _logprobs(model):
    with torch.no_grad():
        return torch.log_softmax(model(IDS).logits.float(), -1)


def test_the_int8_copy_quantises_every_linear_and_stays_close(tiny_policy):
    sampler = int8_copy(tiny_policy)
    layers = tiny_policy.config.num_hidden_layers
    assert len(quantized_linears(sampler)) == 7 * layers + 1  # q k v o gate up down per layer, lm_head
    assert all(not isinstance(m, torch.nn.Linear) for m in sampler.modules())
    gap = (_logprobs(sampler) - _logprobs(tiny_policy)).abs()
    assert 0 < gap.max() < 0.1  # a different policy, by a small margin
    assert next(tiny_policy.parameters()).dtype == torch.float32  # the trained model is untouched


def test_refresh_requantises_from_the_new_weights(tiny_policy):
    model = copy.deepcopy(tiny_policy)
    sampler = int8_copy(model)
    stale = _logprobs(sampler)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    refresh_int8(sampler, model)
    assert torch.equal(_logprobs(sampler), _logprobs(int8_copy(model)))  # as if made afresh
    assert not torch.allclose(_logprobs(sampler), stale)


def test_a_lora_model_is_sampled_with_its_adapters_merged(tiny_policy):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(tiny_policy), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B starts at 0: make the adapter change the policy
    sampler = int8_copy(model)
    gap_merged = (_logprobs(sampler) - _logprobs(model)).abs().max()
    gap_base = (_logprobs(sampler) - _logprobs(tiny_policy)).abs().max()
    assert gap_merged < 0.1 < gap_base
    refresh_int8(sampler, model)  # by the plain names of the merged weights
    assert (_logprobs(sampler) - _logprobs(model)).abs().max() < 0.1


def test_a_session_samples_from_the_int8_copy_and_evaluation_can_ask_for_the_model(tiny_policy, smol_tokenizer):
    from turncredit.config import Config

    model = copy.deepcopy(tiny_policy)
    session = PolicySession.from_model(model, smol_tokenizer, sampler_dtype="int8")
    assert session.samples_from_a_copy and session.backend.model is session.sampler_model
    assert session.sampler_dtype == "int8" and quantized_linears(session.sampler_model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    session.after_update()
    assert torch.equal(_logprobs(session.sampler_model), _logprobs(int8_copy(model)))
    exact = session.with_sampler(Config(), "model")  # eval.dtype's default
    assert exact.backend.model is model and not exact.samples_from_a_copy
    assert session.with_sampler(Config(), "int8") is session


def test_int8_refuses_a_model_off_the_cpu(tiny_policy, monkeypatch):
    monkeypatch.setattr("turncredit.policy.int8_sampler._device", lambda model: torch.device("cuda", 0))
    with pytest.raises(ValueError, match="rollout.dtype: int8.*cuda"):
        int8_copy(tiny_policy)
