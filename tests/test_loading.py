"""Model loading: the tiny test model, checkpoints that round-trip through safetensors, LoRA
merged on save, and clear errors for missing paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from turncredit.policy import (
    load_model,
    load_tokenizer,
    read_checkpoint_meta,
    resolve_model,
    save_checkpoint,
    tiny_model,
)
from turncredit.policy import loading


def _ids(tok) -> torch.Tensor:
    return torch.tensor([tok.encode("Is it an animal? No. Is it a tool?", add_special_tokens=False)])


def _assert_state_equal(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_tiny_model_matches_tokenizer(smol_tokenizer, tiny_policy):
    cfg = tiny_policy.config
    assert cfg.vocab_size == len(smol_tokenizer) == 49152
    assert tiny_policy.get_input_embeddings().weight.shape == (len(smol_tokenizer), 64)
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (
        smol_tokenizer.bos_token_id, smol_tokenizer.eos_token_id, smol_tokenizer.pad_token_id)
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size) == (2, 4, 2, 128)
    assert tiny_policy.get_output_embeddings().weight is tiny_policy.get_input_embeddings().weight
    logits = tiny_policy(_ids(smol_tokenizer)).logits
    assert logits.shape[-1] == len(smol_tokenizer) and torch.isfinite(logits).all()


def test_tiny_model_seeded_and_leaves_global_rng_alone(smol_tokenizer, tiny_policy):
    state = torch.random.get_rng_state()
    again = tiny_model(smol_tokenizer, seed=0)
    other = tiny_model(smol_tokenizer, seed=1, num_hidden_layers=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    _assert_state_equal(again, tiny_policy)
    assert other.config.num_hidden_layers == 1
    assert not torch.equal(other.get_input_embeddings().weight, tiny_policy.get_input_embeddings().weight)


def test_checkpoint_round_trip_is_exact_safetensors(tmp_path, smol_tokenizer, tiny_policy):
    out = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "ckpt", {"step": 7, "note": "x"})
    files = {p.name for p in out.iterdir()}
    assert "model.safetensors" in files and "turncredit.json" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    assert read_checkpoint_meta(out) == {"step": 7, "note": "x"}
    assert json.loads((out / "turncredit.json").read_text())["lora_merged"] is False
    loaded = load_model(str(out))
    _assert_state_equal(loaded, tiny_policy)
    tok = load_tokenizer(str(out))
    assert tok.padding_side == "left" and tok.pad_token == smol_tokenizer.pad_token
    assert tok.chat_template == smol_tokenizer.chat_template
    assert tok.encode("Is it a cat?") == smol_tokenizer.encode("Is it a cat?")
    bf16 = load_model(str(out), dtype="bfloat16")
    assert bf16.dtype == torch.bfloat16


def test_lora_saves_merged_and_reloads(tmp_path, smol_tokenizer, tiny_policy):
    import copy

    from peft import PeftModel

    peft_model = loading.add_lora(copy.deepcopy(tiny_policy), {"r": 4, "lora_alpha": 8})
    assert isinstance(peft_model, PeftModel)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():  # lora_B starts at zero; make the adapter matter
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(n)))
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    x = _ids(smol_tokenizer)
    with torch.no_grad():
        want = peft_model(x).logits
        base_logits = tiny_policy(x).logits
    assert not torch.allclose(want, base_logits, atol=1e-3)

    out = save_checkpoint(peft_model, smol_tokenizer, tmp_path / "lora", {"step": 1})
    assert not list(out.glob("adapter_*")) and (out / "model.safetensors").is_file()
    assert json.loads((out / "turncredit.json").read_text())["lora_merged"] is True
    reloaded = load_model(str(out))
    assert not isinstance(reloaded, PeftModel)
    assert not [k for k in reloaded.state_dict() if "lora" in k or "base_layer" in k]
    with torch.no_grad():
        assert torch.allclose(reloaded(x).logits, want, atol=1e-5)
    # The training model was not merged or modified in place.
    after = peft_model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    # Same result as peft's own (destructive) merge.
    merged = copy.deepcopy(peft_model).merge_and_unload()
    _assert_state_equal(reloaded, merged)
    again = load_model(str(out), lora={"r": 2, "lora_alpha": 2})
    assert isinstance(again, PeftModel)


def test_missing_local_path_one_line_error(tmp_path):
    missing = str(tmp_path / "no" / "model")
    for spec in (missing, "./definitely-missing-model", "~/definitely-missing-model"):
        with pytest.raises(FileNotFoundError) as e:
            load_model(spec)
        assert str(e.value) == f"model path not found: {spec}"
    (tmp_path / "runs").mkdir()
    with pytest.raises(FileNotFoundError, match="model path not found"):
        resolve_model(str(tmp_path / "runs" / "ckpt"))
    f = tmp_path / "weights.safetensors"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="is a file, expected a model directory"):
        resolve_model(str(f))


def test_hub_id_passes_through_and_fails_offline_in_one_line(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub

    monkeypatch.chdir(tmp_path)
    assert resolve_model("no-such-org/no-such-model") == "no-such-org/no-such-model"
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)  # no network retries in tests
    with pytest.raises(OSError) as e:
        load_model("no-such-org/no-such-model")
    msg = str(e.value)
    assert "'no-such-org/no-such-model'" in msg and "\n" not in msg


def test_bad_dtype():
    with pytest.raises(ValueError, match="model dtype: expected one of"):
        load_model("smollm2", dtype="float8")


def test_tokenizer_fast_path_skips_model_conversion(monkeypatch, tmp_path, smol_tokenizer):
    src = loading.cache_root()
    tok_dir = src / loading.SMOLLM2_TOKENIZER_DIR
    if not tok_dir.is_dir():  # the fixture may have loaded from the full model dir
        tok_dir = src / loading.SMOLLM2_DIR
    dst = tmp_path / loading.SMOLLM2_TOKENIZER_DIR
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tok_dir / name).is_file():
            shutil.copy2(tok_dir / name, dst / name)
    monkeypatch.setenv("TURNCREDIT_CACHE", str(tmp_path))
    monkeypatch.setattr(loading, "_smollm2_model_dir", lambda: pytest.fail("converted the model"))
    monkeypatch.setattr(loading, "smollm2_gguf", lambda: pytest.fail("read the GGUF"))
    tok = load_tokenizer("smollm2")
    assert tok.encode("Is it a cat?") == smol_tokenizer.encode("Is it a cat?")
    assert not (tmp_path / loading.SMOLLM2_DIR).exists()


def test_publish_keeps_the_winner(tmp_path):
    final = tmp_path / "cache"
    final.mkdir()
    (final / "tokenizer.json").write_text("winner")
    loser = tmp_path / "tmp"
    loser.mkdir()
    (loser / "tokenizer.json").write_text("loser")
    loading._publish(loser, final)
    assert (final / "tokenizer.json").read_text() == "winner" and not loser.exists()


@pytest.mark.slow
def test_real_smollm2_loads(smol_tokenizer):
    path = resolve_model("smollm2")
    assert isinstance(path, Path) and (path / "model.safetensors").is_file()
    assert not list(path.glob("*.bin"))
    model = load_model("smollm2")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.dtype == torch.float32 and getattr(model.config, "quantization_config", None) is None
    assert model.config.vocab_size == len(smol_tokenizer)
    from turncredit.chat import ChatBridge

    bridge = ChatBridge(smol_tokenizer)
    ids = bridge.opening_ids([{"role": "user", "content": "What is the capital of France?"}])
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                             eos_token_id=bridge.end_of_turn_id, pad_token_id=smol_tokenizer.pad_token_id)
    assert "Paris" in bridge.decode_action(out[0, len(ids):].tolist())


def test_plain_state_dict_is_the_state_dict_without_hooks(smol_tokenizer):
    """What exports read inside FSDP's gathered window must be exactly `state_dict()`: same keys
    in the same order (tied weights under both names), same values, persistent buffers only."""
    for model in (loading.tiny_model(smol_tokenizer, seed=1),
                  loading.add_lora(loading.tiny_model(smol_tokenizer, seed=1), {"r": 2, "lora_alpha": 4})):
        want, got = model.state_dict(), loading.plain_state_dict(model)
        assert list(got) == list(want)
        assert all(torch.equal(got[k], want[k]) for k in want)
    calls = []
    model.register_state_dict_pre_hook(lambda *a, **k: calls.append(1))
    loading.plain_state_dict(model)
    assert calls == []  # FSDP's pre-hook would reshard the gathered weights
