"""vLLM as the generation backend on a GPU, colocated with the trainer, behind `GenerationState`.

The engine is built from the trainer's own model, not from a checkpoint: its config goes to a
scratch folder, vLLM starts with dummy weights, and `sync_weights` copies the trainer's weights
in (LoRA merged, out of place) before the first rollout and after every update. Each turn sends
every active row's whole context as token ids in one `generate` call; with prefix caching on,
vLLM encodes only what it has not seen (the new reply and the last sampled token), which is the
multi-turn KV reuse the HF backend does by hand. After a weight sync the prefix cache is reset,
since its blocks were computed with the old weights.

Nothing here imports vLLM until an engine is built, so CPU machines never need it.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from typing import Any, Sequence

import torch

from turncredit.generation import Generation, SamplingParams
from turncredit.policy.backends import BACKENDS

INSTALL_HINT = (
    "rollout.backend: vllm needs the vllm package on a CUDA machine "
    "(pip install vllm, with the torch build vllm pins); use rollout.backend: kv elsewhere"
)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


def trainer_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs under the plain Hugging Face names vLLM's `load_weights` expects."""
    from turncredit.policy.loading import exported_weights

    return [(name, t.detach()) for name, t in exported_weights(model)[1].items()]


def _core_config(model: torch.nn.Module) -> Any:
    core = model.get_base_model() if hasattr(model, "get_base_model") else model
    return core.config


@BACKENDS.register("vllm")
class VLLMBackend:
    """A colocated vLLM engine fed with the trainer's weights.

    `dtype` "model" samples in the trained weights' dtype; "bfloat16" lets vLLM hold bf16
    weights (no extra copy on the trainer side). The other options go to `vllm.LLM` as they
    are: `gpu_memory_utilization` is the share of the GPU the engine may take (weights plus KV
    blocks); the trainer keeps the rest.
    """

    #: the engine holds its own copy of the weights: `PolicySession` makes no sampling copy
    owns_weights = True

    def __init__(
        self, model: torch.nn.Module, end_of_turn_id: int, pad_token_id: int, *,
        dtype: str = "model", gpu_memory_utilization: float = 0.3, max_model_len: int | None = None,
        enforce_eager: bool = False, engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if dtype not in ("model", "bfloat16"):
            raise ValueError(f"rollout.dtype: the vllm backend holds its weights as model or bfloat16, got {dtype!r} "
                             "(int8 is the CPU kv backend's sampling copy)")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"rollout.backend_options.gpu_memory_utilization: expected (0, 1], got {gpu_memory_utilization}")
        # colocated: the engine core runs in this process, so a weight sync hands tensors over
        # directly instead of pickling them to a worker process
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = _import_vllm()
        self.vllm = vllm
        self.eot = end_of_turn_id
        self.pad = pad_token_id
        weights_dtype = next(model.parameters()).dtype if dtype == "model" else getattr(torch, dtype)
        self._config_dir = tempfile.TemporaryDirectory(prefix="turncredit-vllm-")
        cfg = _core_config(model)
        cfg.save_pretrained(self._config_dir.name)
        kwargs: dict[str, Any] = dict(
            model=self._config_dir.name, load_format="dummy", skip_tokenizer_init=True,
            dtype=str(weights_dtype).removeprefix("torch."), enable_prefix_caching=True,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs",  # log-probs after temperature / top-p, as we sample
            seed=0,
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kwargs)
        self.syncs = 0
        self.sync_weights(model)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's current weights into the engine and drop KV computed with the old."""
        weights = trainer_weights(model)
        self.llm.apply_model(lambda m: m.load_weights(weights))
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def start(self, n_rows: int, seed: int) -> "_VLLMState":
        return _VLLMState(self, n_rows, seed)


class _VLLMState:
    def __init__(self, backend: VLLMBackend, n_rows: int, seed: int) -> None:
        self.b = backend
        self.ctx: dict[int, list[int]] = {r: [] for r in range(n_rows)}
        self.next_row = n_rows
        self.seed = seed
        self.turn = 0
        self.tokens_prefilled = 0

    def _sampling(self, params: SamplingParams, row: int) -> Any:
        # one seed per (batch, row, turn): a rerun draws the same tokens, rows stay independent
        seed = zlib.crc32(f"{self.seed}:{row}:{self.turn}".encode()) & 0x7FFFFFFF
        return self.b.vllm.SamplingParams(
            n=1, temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0 if params.greedy else params.top_p,
            top_k=-1 if params.greedy or params.top_k <= 0 else params.top_k,  # -1: no cut
            max_tokens=params.max_new_tokens, stop_token_ids=[self.b.eot], ignore_eos=True,
            logprobs=0, seed=seed, detokenize=False,
        )

    def generate(self, rows: Sequence[int], new_tokens: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        for r, t in zip(rows, new_tokens, strict=True):
            self.ctx[r] += list(t)
        prompts = [{"prompt_token_ids": list(self.ctx[r])} for r in rows]
        outs = self.b.llm.generate(prompts, [self._sampling(params, r) for r in rows], use_tqdm=False)
        self.turn += 1
        results = []
        for r, prompt, out in zip(rows, prompts, outs, strict=True):
            cached = getattr(out, "num_cached_tokens", None) or 0
            self.tokens_prefilled += len(prompt["prompt_token_ids"]) - cached
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            if self.b.eot in ids:
                ids = ids[: ids.index(self.b.eot) + 1]
            lps = [_picked_logprob(step, tok) for step, tok in zip(comp.logprobs or [], ids)]
            if len(lps) != len(ids):
                raise RuntimeError(f"vllm returned {len(lps)} log-probs for {len(ids)} tokens (row {r})")
            self.ctx[r] += ids
            results.append(Generation(ids, lps))
        return results

    def finish(self, rows: Sequence[int]) -> None:
        for r in rows:
            self.ctx.pop(r, None)

    def add_rows(self, n: int) -> list[int]:
        ids = list(range(self.next_row, self.next_row + n))
        self.next_row += n
        self.ctx.update((r, []) for r in ids)
        return ids


def _picked_logprob(step: dict[int, Any], token: int) -> float:
    """vLLM's per-position {token id: Logprob} always holds the sampled token when logprobs=0."""
    entry = step[token]
    return float(getattr(entry, "logprob", entry))
