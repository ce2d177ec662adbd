"""`bf16: auto` turns bf16 on only where the device computes it natively, honouring the
kernel-selection variables; an explicit setting wins; the run records what it chose."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from turncredit import precision
from turncredit.config import load_config
from turncredit.policy.session import PolicySession
from turncredit.precision import Bf16Probe, judge_cpu, probe_bf16, resolve_bf16


@pytest.mark.parametrize("avx512_bf16, amx, aten, onednn, native", [
    (True, False, "AVX512", None, True),            # Zen 4 / Cooper Lake
    (False, True, "AVX512", None, True),            # AMX alone (Sapphire Rapids reports both)
    (True, True, "AVX512", "AVX512_CORE_AMX", True),
    (False, False, "AVX2", None, False),            # an AVX2-only EPYC or laptop
    (False, False, "AVX512", None, False),          # Skylake-SP: AVX512 without bf16
    (True, False, "AVX2", None, False),             # ATEN_CPU_CAPABILITY=avx2
    (True, True, "AVX512", "AVX2", False),          # ONEDNN_MAX_CPU_ISA=AVX2
    (True, False, "AVX512", "AVX512_CORE", False),  # oneDNN capped below its bf16 ISA
])
def test_judge_cpu_both_ways(avx512_bf16, amx, aten, onednn, native):
    probe = judge_cpu(avx512_bf16, amx, aten, onednn)
    assert probe.native is native
    assert probe.device == "cpu" and probe.detail


def _fake_cpu(monkeypatch, *, avx512_bf16: bool, amx: bool, aten: str) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx2_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: aten)
    monkeypatch.setattr(precision, "_PROBES", {})


def test_probe_reads_the_cpu_and_the_onednn_cap(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    _fake_cpu(monkeypatch, avx512_bf16=True, amx=False, aten="AVX512")
    assert probe_bf16("cpu").native
    assert resolve_bf16("auto") is True
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # case as users type it
    assert not probe_bf16("cpu").native
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")  # oneDNN's older name for the same cap
    assert "AVX512_CORE" in probe_bf16("cpu").detail and not probe_bf16("cpu").native
    _fake_cpu(monkeypatch, avx512_bf16=False, amx=False, aten="AVX2")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA")
    assert resolve_bf16("auto") is False


def test_explicit_setting_wins_over_the_probe(monkeypatch):
    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", False, "faked")})
    assert resolve_bf16(True) is True and resolve_bf16(False) is False and resolve_bf16("auto") is False
    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", True, "faked")})
    assert resolve_bf16(False) is False and resolve_bf16("auto") is True
    with pytest.raises(ValueError, match="bf16"):
        resolve_bf16("sometimes")


def test_kernel_selection_variables_make_this_cpu_look_avx2_only():
    """The real probe in a fresh process: with PyTorch's and oneDNN's kernels capped at AVX2,
    no CPU counts as native bf16, whatever it has."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    code = "import json; from turncredit.precision import probe_bf16; print(json.dumps(probe_bf16().to_dict()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["native"] is False and "AVX2" in probe["detail"]


def test_auto_sampler_dtype_follows_the_probe(monkeypatch, tiny_policy, smol_tokenizer):
    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", True, "faked")})
    s = PolicySession.from_model(tiny_policy, smol_tokenizer, sampler_dtype="auto")
    assert s.sampler_dtype == "bfloat16" and next(s.sampler_model.parameters()).dtype == torch.bfloat16
    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", False, "faked")})
    s = PolicySession.from_model(tiny_policy, smol_tokenizer, sampler_dtype="auto")
    assert s.sampler_dtype == "model" and s.sampler_model is None


@pytest.mark.parametrize("native", [True, False])
def test_the_run_uses_and_records_what_auto_became(monkeypatch, tmp_path, tiny_policy, smol_tokenizer, native):
    from turncredit.train import trainer as trainer_mod
    from turncredit.train import update as update_mod

    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", native, "faked probe")})
    entered = []
    real_autocast = update_mod.autocast
    monkeypatch.setattr(update_mod, "autocast", lambda on: entered.append(on) or real_autocast(on))
    cfg = load_config(None, ["env.options.max_turns=2", "env.options.num_candidates=4", "rollout.tasks_per_step=1",
                             "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1"])
    assert cfg.train.bf16 == "auto"
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    trainer = trainer_mod.Trainer(cfg, tmp_path / "run", session=session)
    (metrics,) = trainer.train()

    assert trainer.bf16 is native and set(entered) == {native}
    assert metrics["bf16_update"] is native
    assert ("bf16" if native else "fp32") in trainer.precision_note and "faked probe" in trainer.precision_note
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["train"]["bf16"] == "auto"  # the setting stays as given, so a resume elsewhere re-decides
    assert saved["resolved"]["bf16_update"] is native and saved["resolved"]["probe"]["detail"] == "faked probe"
    assert load_config(tmp_path / "run" / "config.yaml").train.bf16 == "auto"  # the record is not a key


def test_sft_records_its_precision(monkeypatch, tiny_policy, smol_tokenizer):
    from turncredit.config import SFTConfig
    from turncredit.train.sft import run_sft

    monkeypatch.setattr(precision, "_PROBES", {"cpu": Bf16Probe("cpu", False, "faked")})
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    chat = [{"role": "user", "content": "Ask."}, {"role": "assistant", "content": "Is it an animal?"}]
    (rec,) = run_sft(session, [chat], SFTConfig(epochs=1, batch_size=1))
    assert rec["bf16"] is False
    (rec,) = run_sft(session, [chat], SFTConfig(epochs=1, batch_size=1, bf16=True))
    assert rec["bf16"] is True
