"""Policy models: loading (the shipped SmolLM2, a local directory, a hub id), LoRA, checkpoints.

Kept import-light: `turncredit.policy.session` (which pulls in the rollout engine) is imported
by its own module path, not from here.
"""

# registers the "vllm" generation backend beside kv and recompute (vLLM itself is imported only
# when that backend is built); here rather than in backends.py, which vllm_backend imports
from turncredit.policy import vllm_backend as _vllm_backend  # noqa: F401
from turncredit.policy.loading import (
    add_lora,
    cache_root,
    load_model,
    load_tokenizer,
    read_checkpoint_meta,
    resolve_model,
    save_checkpoint,
    tiny_model,
)

__all__ = [
    "add_lora",
    "cache_root",
    "load_model",
    "load_tokenizer",
    "read_checkpoint_meta",
    "resolve_model",
    "save_checkpoint",
    "tiny_model",
]
