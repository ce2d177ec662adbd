"""A local Hugging Face model as a chat backend (any hub id or path `load_model` accepts).

Greedy decoding, so the judge is deterministic and its answers can be cached. Calls are
serialised with a lock: one local model answers one conversation at a time.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from turncredit.errors import EnvFailure
from turncredit.llm.openai_client import CHAT_CLIENTS, Messages


@CHAT_CLIENTS.register("hf")
class HFChatClient:
    def __init__(self, model: str = "smollm2", *, max_tokens: int = 8, dtype: str = "float32",
                 device: str = "cpu", temperature: float = 0.0, model_obj: Any = None, tokenizer: Any = None) -> None:
        from turncredit.policy.loading import load_model, load_tokenizer

        if temperature != 0.0:
            raise ValueError("hf chat client: only greedy decoding (temperature 0) is supported")
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = (model_obj if model_obj is not None else load_model(model, dtype=dtype)).to(device).eval()
        self.max_tokens = max_tokens
        self._lock = threading.Lock()

    @torch.no_grad()
    def complete(self, messages: Messages) -> str:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)
        device = next(self.model.parameters()).device
        ids = {k: v.to(device) for k, v in ids.items()}
        try:
            with self._lock:
                out = self.model.generate(**ids, max_new_tokens=self.max_tokens, do_sample=False,
                                          pad_token_id=self.tokenizer.pad_token_id)
        except RuntimeError as e:  # out of memory, a bad template: the episode cannot go on
            raise EnvFailure(f"hf chat client: generation failed ({e})") from None
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    def complete_many(self, batch: Sequence[Messages]) -> list[str | EnvFailure]:
        out: list[str | EnvFailure] = []
        for m in batch:
            try:
                out.append(self.complete(m))
            except EnvFailure as e:
                out.append(e)
        return out
