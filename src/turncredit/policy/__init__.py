"""Policy models: loading (the shipped SmolLM2, a local directory, a hub id), LoRA, checkpoints.

Kept import-light: `turncredit.policy.session` (which pulls in the rollout engine) is imported
by its own module path, not from here.
"""

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
