"""A loaded policy with everything the stages need around it: tokenizer, chat bridge, backend."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from turncredit.chat import ChatBridge
from turncredit.config import Config
from turncredit.policy.loading import load_model, load_tokenizer, save_checkpoint
from turncredit.policy.backends import BACKENDS, PolicyBackend
from turncredit.precision import resolve_bf16


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def sampler_dtype_for(model: torch.nn.Module, setting: str) -> str:
    """rollout.dtype on this model's device: "auto" samples from a bf16 copy only where bf16 is
    native, and never copies weights that are bf16 already."""
    if setting != "auto":
        return setting
    param = next(model.parameters())
    return "bfloat16" if param.dtype != torch.bfloat16 and resolve_bf16("auto", param.device) else "model"


@dataclass
class PolicySession:
    model: torch.nn.Module
    tokenizer: Any
    bridge: ChatBridge
    backend: PolicyBackend
    #: the weights the backend samples with when they are not `model` itself (a bf16 copy)
    sampler_model: torch.nn.Module | None = None
    #: what rollout.dtype became: "model" or "bfloat16" ("auto" resolved on this device)
    sampler_dtype: str = "model"

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @classmethod
    def from_model(
        cls, model: torch.nn.Module, tokenizer: Any, backend: str = "kv",
        chat_template_kwargs: dict[str, Any] | None = None, sampler_dtype: str = "model",
        backend_options: dict[str, Any] | None = None,
    ) -> "PolicySession":
        bridge = ChatBridge(tokenizer, chat_template_kwargs or None)
        engine_cls = BACKENDS.get(backend)
        options = dict(backend_options or {})
        sampler_dtype = sampler_dtype_for(model, sampler_dtype)
        sampler = None
        if getattr(engine_cls, "owns_weights", False):
            options["dtype"] = sampler_dtype  # the engine keeps its own copy in that dtype
        elif sampler_dtype != "model":
            sampler = copy.deepcopy(model).to(getattr(torch, sampler_dtype)).eval()
            sampler.requires_grad_(False)
        engine = engine_cls(sampler or model, bridge.end_of_turn_id, int(tokenizer.pad_token_id), **options)
        return cls(model, tokenizer, bridge, engine, sampler, sampler_dtype)

    @property
    def samples_from_a_copy(self) -> bool:
        """The backend samples from weights other than `model` (a dtype copy, or an engine's
        own), which `after_update` must refresh."""
        return self.sampler_model is not None or hasattr(self.backend, "sync_weights")

    @torch.no_grad()
    def after_update(self) -> None:
        """The weights changed: refresh the sampling copy and whatever the backend holds."""
        if self.sampler_model is not None:
            for dst, src in zip(self.sampler_model.parameters(), self.model.parameters()):
                dst.copy_(src)
        sync = getattr(self.backend, "sync_weights", None)
        if sync is not None:
            sync(self.sampler_model or self.model)

    @classmethod
    def from_config(cls, cfg: Config, model_name: str | None = None) -> "PolicySession":
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        torch.manual_seed(cfg.run.seed)
        name = model_name or cfg.model.name
        tokenizer = load_tokenizer(name)
        lora = cfg.model.lora
        lora_opts = (
            {"r": lora.r, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
             "target_modules": lora.target_modules}
            if lora.enabled else None
        )
        model = load_model(name, dtype=cfg.model.dtype, lora=lora_opts).to(resolve_device(cfg.model.device))
        return cls.from_model(model, tokenizer, cfg.rollout.backend, cfg.model.chat_template_kwargs,
                              cfg.rollout.dtype, cfg.rollout.backend_options)

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        save_checkpoint(self.model, self.tokenizer, path, extra or {})
