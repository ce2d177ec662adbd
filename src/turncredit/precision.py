"""Whether this device computes bf16 natively, and so what `bf16: auto` becomes.

bf16 autocast halves the time of a CPU update where the cores have bf16 instructions
(AVX512-BF16, AMX) and makes it ~25× slower where they do not: oneDNN then falls back to
converting kernels, and on an AVX2-only CPU to its reference path. So `auto` turns bf16 on only
where the hardware computes it natively *and* the kernel selection in force may use it:
PyTorch's `ATEN_CPU_CAPABILITY` and oneDNN's `ONEDNN_MAX_CPU_ISA` (`DNNL_MAX_CPU_ISA`) can cap
both below what the CPU has, and `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` is how a CPU
without AVX512/AMX is imitated on one that has them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import torch

#: oneDNN ISA caps (ONEDNN_MAX_CPU_ISA values) under which its bf16 kernels use native
#: instructions; every lower cap (SSE41, AVX, AVX2*, AVX512_CORE, AVX512_CORE_VNNI) emulates
ONEDNN_NATIVE_BF16_CAPS = frozenset({
    "ALL", "DEFAULT", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
    "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2",
})
#: ATen capabilities whose vectorised kernels include the bf16 paths (below them: AVX2, DEFAULT)
ATEN_NATIVE_BF16_CAPS = frozenset({"AVX512", "AVX512_BF16", "AMX"})


@dataclass(frozen=True)
class Bf16Probe:
    """What was found: `native` decides `auto`; `detail` says why, for logs and run records."""

    device: str
    native: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def onednn_max_isa() -> str | None:
    """The oneDNN ISA cap set in the environment (upper-cased), or None when uncapped."""
    value = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return value.strip().upper() if value else None


def judge_cpu(avx512_bf16: bool, amx_bf16: bool, aten_capability: str, onednn_cap: str | None) -> Bf16Probe:
    """Native bf16 on an x86 CPU: the instructions exist and neither kernel selection caps them off."""
    found = [name for name, has in (("AVX512-BF16", avx512_bf16), ("AMX-BF16", amx_bf16)) if has]
    where = f"ATen {aten_capability}, oneDNN cap {onednn_cap or 'none'}"
    if not found:
        return Bf16Probe("cpu", False, f"no AVX512-BF16 or AMX on this CPU ({where}): bf16 would be emulated")
    if aten_capability.upper() not in ATEN_NATIVE_BF16_CAPS:
        return Bf16Probe("cpu", False, f"{'/'.join(found)} present but ATEN_CPU_CAPABILITY caps kernels at "
                                       f"{aten_capability} ({where})")
    if onednn_cap is not None and onednn_cap not in ONEDNN_NATIVE_BF16_CAPS:
        return Bf16Probe("cpu", False, f"{'/'.join(found)} present but ONEDNN_MAX_CPU_ISA={onednn_cap} "
                                       f"caps oneDNN below native bf16 ({where})")
    return Bf16Probe("cpu", True, f"{'/'.join(found)} ({where})")


def probe_bf16(device: str | torch.device = "cpu") -> Bf16Probe:
    """Look at this machine: CUDA asks the driver; an x86 CPU its feature flags and the kernel
    selection in force; other CPUs whether oneDNN has a native bf16 path."""
    dev = torch.device(device)
    if dev.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        name = torch.cuda.get_device_name(dev)
        return Bf16Probe("cuda", ok, f"{name}: {'bf16 supported' if ok else 'no bf16'}")
    if dev.type != "cpu":
        return Bf16Probe(dev.type, False, f"{dev.type}: not probed, fp32")
    aten = torch.backends.cpu.get_cpu_capability()
    if torch.cpu._is_avx2_supported() or aten.startswith("AVX"):  # x86
        return judge_cpu(torch.cpu._is_avx512_bf16_supported(), torch.cpu._is_amx_tile_supported(),
                         aten, onednn_max_isa())
    ok = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and onednn_max_isa() is None
    return Bf16Probe("cpu", ok, f"non-x86 CPU ({aten}): oneDNN bf16 {'native' if ok else 'unavailable'}")


_PROBES: dict[str, Bf16Probe] = {}


def cached_probe(device: str | torch.device = "cpu") -> Bf16Probe:
    """`probe_bf16`, once per device per process (the answer cannot change while it runs)."""
    key = str(torch.device(device))
    if key not in _PROBES:
        _PROBES[key] = probe_bf16(key)
    return _PROBES[key]


def resolve_bf16(setting: bool | str, device: str | torch.device = "cpu") -> bool:
    """An explicit true/false wins; "auto" is bf16 exactly where the device computes it natively."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"bf16: expected true, false or 'auto', got {setting!r}")
    return cached_probe(device).native


@dataclass(frozen=True)
class Precision:
    """What a stage runs in, from its setting and this device: one object that a stage uses,
    prints (`note`) and records (`to_dict`)."""

    bf16: bool
    setting: bool | str
    probe: Bf16Probe

    def note(self, what: str) -> str:
        why = f"auto: {self.probe.detail}" if self.setting == "auto" else f"set to {self.setting}"
        return f"{what}: {'bf16' if self.bf16 else 'fp32'} ({why})"

    def to_dict(self) -> dict[str, Any]:
        return {"bf16": self.bf16, "setting": self.setting, "probe": self.probe.to_dict()}


def choose_precision(setting: bool | str, device: str | torch.device = "cpu") -> Precision:
    return Precision(resolve_bf16(setting, device), setting, cached_probe(device))
