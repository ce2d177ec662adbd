import json

import pytest
import torch

from turncredit.policy.attention import CPU_GQA_SDPA, use_cpu_gqa_attention
from turncredit.policy.loading import tiny_model


@pytest.fixture
def gqa_model(smol_tokenizer):
    # 6 query heads over 2 KV heads: transformers' sdpa copies the KV heads whenever a mask is given
    return tiny_model(smol_tokenizer, num_attention_heads=6, num_key_value_heads=2, hidden_size=96)


def _logits(model, ids, mask, impl):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


def test_cpu_gqa_attention_equals_transformers_sdpa_with_padding(gqa_model):
    assert gqa_model.config._attn_implementation == CPU_GQA_SDPA  # tiny_model loads as load_model does
    ids = torch.randint(0, 1000, (3, 19), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 19, dtype=torch.long)
    mask[0, :6] = 0  # left padding of different lengths: a real mask reaches the kernel
    mask[1, :1] = 0
    ours = _logits(gqa_model, ids, mask, CPU_GQA_SDPA)
    ref = _logits(gqa_model, ids, mask, "sdpa")
    torch.testing.assert_close(ours[mask.bool()], ref[mask.bool()], rtol=1e-5, atol=1e-5)
    # no mask at all: the causal flag has to take over
    torch.testing.assert_close(_logits(gqa_model, ids, None, CPU_GQA_SDPA), _logits(gqa_model, ids, None, "sdpa"),
                               rtol=1e-5, atol=1e-5)


def test_cached_decoding_with_cpu_gqa_matches_a_full_forward(gqa_model):
    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        full = gqa_model(input_ids=ids, attention_mask=mask).logits[:, -1]
        out = gqa_model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
        step = gqa_model(input_ids=ids[:, -1:], attention_mask=mask, past_key_values=out.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)


def test_the_switch_is_not_saved_and_leaves_other_kernels_alone(gqa_model, tmp_path):
    gqa_model.save_pretrained(tmp_path)
    assert CPU_GQA_SDPA not in (tmp_path / "config.json").read_text()  # a checkpoint loads anywhere
    gqa_model.set_attn_implementation("eager")
    use_cpu_gqa_attention(gqa_model)
    assert gqa_model.config._attn_implementation == "eager"
    assert json.loads((tmp_path / "config.json").read_text())["num_key_value_heads"] == 2
