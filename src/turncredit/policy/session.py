"""A loaded policy with everything the stages need around it: tokenizer, chat bridge, backend."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

from turncredit.chat import ChatBridge
from turncredit.config_types import Config
from turncredit.policy.int8_sampler import int8_copy, refresh_int8
from turncredit.policy.loading import load_model, load_tokenizer, save_checkpoint
from turncredit.policy.backends import BACKENDS, PolicyBackend
from turncredit.precision import resolve_bf16
from turncredit.registry import Registry


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


class SamplerCopy(NamedTuple):
    """How to make the weights a backend samples from out of the trained model, and refresh them."""

    make: Callable[[torch.nn.Module], torch.nn.Module]
    refresh: Callable[[torch.nn.Module, torch.nn.Module], None]  # (copy, trained model)


def _bf16_copy(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).to(torch.bfloat16).eval().requires_grad_(False)


@torch.no_grad()
def _copy_parameters(sampler: torch.nn.Module, model: torch.nn.Module) -> None:
    for dst, src in zip(sampler.parameters(), model.parameters()):
        dst.copy_(src)


#: rollout.dtype → the sampling copy ("model" samples from the trained weights themselves)
SAMPLER_COPIES: Registry[SamplerCopy] = Registry("sampler dtype")
SAMPLER_COPIES.register("bfloat16")(SamplerCopy(_bf16_copy, _copy_parameters))
SAMPLER_COPIES.register("int8")(SamplerCopy(int8_copy, refresh_int8))


@dataclass
class PolicySession:
    model: torch.nn.Module
    tokenizer: Any
    bridge: ChatBridge
    backend: PolicyBackend
    #: the weights the backend samples with when they are not `model` itself (a bf16 or int8 copy)
    sampler_model: torch.nn.Module | None = None
    #: what rollout.dtype became: "model", "bfloat16" or "int8" ("auto" resolved on this device)
    sampler_dtype: str = "model"

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

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
            sampler = SAMPLER_COPIES.get(sampler_dtype).make(model)
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
            SAMPLER_COPIES.get(self.sampler_dtype).refresh(self.sampler_model, self.model)
        sync = getattr(self.backend, "sync_weights", None)
        if sync is not None:
            sync(self.sampler_model or self.model)

    def with_sampler(self, cfg: Config, sampler_dtype: str) -> "PolicySession":
        """This session's model, sampled from in `sampler_dtype` (itself when it already is)."""
        if sampler_dtype_for(self.model, sampler_dtype) == self.sampler_dtype:
            return self
        return PolicySession.from_model(self.model, self.tokenizer, cfg.rollout.backend, cfg.model.chat_template_kwargs,
                                        sampler_dtype, cfg.rollout.backend_options)

    @classmethod
    def from_config(cls, cfg: Config, model_name: str | None = None,
                    sampler_dtype: str | None = None) -> "PolicySession":
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
                              sampler_dtype or cfg.rollout.dtype, cfg.rollout.backend_options)

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        save_checkpoint(self.model, self.tokenizer, path, extra or {})
