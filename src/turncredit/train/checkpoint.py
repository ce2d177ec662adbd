"""Resumable training checkpoints: written atomically, loaded without unpickling anything.

A checkpoint folder is an ordinary model checkpoint (`model.safetensors`, tokenizer,
`turncredit.json`; what `eval` and `train` load) plus the training state beside it:

* `trainable.safetensors`: the parameters being trained, by name (the LoRA adapter, or every
  weight in full fine-tuning: the exported weights have LoRA merged in, so they cannot resume);
* `optimizer.safetensors`: the optimizer's per-parameter tensors, keyed `<param name>/<key>`;
* `rng.safetensors`: torch's CPU (and CUDA) generator states and numpy's key array;
* `train_state.json`: step, Python's and numpy's other RNG state, optimizer hyperparameters.

Everything is written into `.<name>.tmp-*` beside the final folder, flushed to disk, then
renamed: a folder under its final name is always complete, and a crash leaves only a temp
folder that the next resume deletes. Old step checkpoints are renamed away before deletion.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from turncredit.errors import CheckpointError
from turncredit.policy.loading import temp_dir_beside
from turncredit.train.distributed import full_tensor, is_sharded, shard_like

STATE_FILE = "train_state.json"
STEP_DIR = re.compile(r"^checkpoint_step(\d+)$")
FINAL_DIR = "checkpoint"


def step_dir_name(step: int) -> str:
    return f"checkpoint_step{step:05d}"


# ---------------------------------------------------------------------------- RNG


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every global generator's state: tensors for safetensors, the rest for JSON."""
    version, internal, gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    tensors = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(np_keys.astype(np.int64))}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    meta = {"python": [version, list(internal), gauss], "numpy": [np_kind, int(np_pos), int(np_has_gauss), float(np_gauss)]}
    return tensors, meta


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((kind, tensors["numpy_keys"].numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


# ---------------------------------------------------------------------------- optimizer


def trainable_named(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def optimizer_tensors(optimizer: torch.optim.Optimizer, names: list[str]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The optimizer's state keyed by parameter name (not position), and its param groups;
    sharded state is gathered whole (a collective: every rank calls this)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for idx, state in sd["state"].items():
        for key, value in state.items():
            t = full_tensor(value) if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"{names[idx]}/{key}"] = t.detach().clone().contiguous()
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, groups


def load_optimizer(optimizer: torch.optim.Optimizer, params: dict[str, torch.nn.Parameter], tensors: dict[str, torch.Tensor],
                   groups: list[dict[str, Any]], where: Path) -> None:
    """Inverse of `optimizer_tensors`; per-element state (Adam's moments) is sharded like its parameter."""
    index = {n: i for i, n in enumerate(params)}
    plist = list(params.values())
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, t in tensors.items():
        name, _, field = key.rpartition("/")
        if name not in index:
            raise CheckpointError(f"{where}: optimizer state for unknown parameter {name!r}")
        p = plist[index[name]]
        state.setdefault(index[name], {})[field] = shard_like(t, p) if t.dim() and t.shape == p.shape else t
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# ---------------------------------------------------------------------------- write


def _fsync_tree(root: Path) -> None:
    for f in root.rglob("*"):
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(run_dir: Path, name: str, session: Any, optimizer: torch.optim.Optimizer,
                     step: int, extra: dict[str, Any], write: bool = True) -> Path:
    """Write `run_dir/name` atomically: the model checkpoint plus everything a resume needs.

    Under several ranks every rank calls this (sharded optimizer state is gathered) and only
    the one with `write` writes; the weights must be whole (`full_weights`)."""
    final = run_dir / name
    moments = [v for st in optimizer.state.values() for v in st.values()]
    if not write and not any(torch.is_tensor(v) and is_sharded(v) for v in moments):
        return final  # replicas: nothing to take part in
    params = trainable_named(session.model)
    opt_tensors, groups = optimizer_tensors(optimizer, list(params))
    if not write:
        return final
    tmp = temp_dir_beside(run_dir, name)
    session.save(tmp, extra={**extra, "step": step})
    save_file({n: p.detach().contiguous() for n, p in params.items()}, str(tmp / "trainable.safetensors"))
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    rng_tensors, rng_meta = rng_state()
    save_file(rng_tensors, str(tmp / "rng.safetensors"))
    state = {"step": step, "rng": rng_meta, "optimizer_param_groups": groups, "trainable": sorted(params)}
    (tmp / STATE_FILE).write_text(json.dumps(state) + "\n")
    _fsync_tree(tmp)
    if final.exists():  # the final checkpoint of a run that is being continued
        discard(final)
    os.rename(tmp, final)
    return final


def discard(path: Path) -> None:
    """Rename first (atomic), then delete: a half-deleted folder never keeps a checkpoint's name."""
    trash = path.with_name(f".{path.name}.trash-{os.getpid()}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's step checkpoints, oldest first (not the final one)."""
    steps = sorted((int(m.group(1)), d) for d in run_dir.iterdir() if (m := STEP_DIR.match(d.name)))
    return [d for _, d in steps]


def prune(run_dir: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` step checkpoints (0 = keep all); the final one always stays."""
    if keep_last <= 0:
        return
    for d in step_checkpoints(run_dir)[:-keep_last]:
        discard(d)


def clean_leftovers(run_dir: Path) -> list[str]:
    """Delete temp and trash folders a killed process left behind; returns their names."""
    gone = []
    for d in run_dir.iterdir():
        if d.is_dir() and d.name.startswith(".checkpoint") and (".tmp-" in d.name or ".trash-" in d.name):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d.name)
    return gone


# ---------------------------------------------------------------------------- read


def read_state(path: Path) -> dict[str, Any]:
    f = path / STATE_FILE
    if not f.is_file():
        raise CheckpointError(f"{path}: not a resumable checkpoint (no {STATE_FILE})")
    try:
        state = json.loads(f.read_text())
        int(state["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{f}: corrupt training state ({e})") from None
    return state


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The resumable checkpoint with the highest step (the final one wins a tie)."""
    best: tuple[int, int, Path] | None = None
    if not run_dir.is_dir():
        return None
    for d in run_dir.iterdir():
        if not (d.name == FINAL_DIR or STEP_DIR.match(d.name)) or not (d / STATE_FILE).is_file():
            continue
        key = (int(read_state(d)["step"]), d.name == FINAL_DIR, d)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def _load(path: Path, name: str) -> dict[str, torch.Tensor]:
    f = path / name
    if not f.is_file():
        raise CheckpointError(f"{path}: incomplete checkpoint, {name} is missing")
    try:
        return load_file(str(f))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{f}: corrupt safetensors file ({e})") from None


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore trained parameters, optimizer and RNG states from `path`; returns its step."""
    state = read_state(path)
    params = trainable_named(model)
    saved = _load(path, "trainable.safetensors")
    if sorted(saved) != sorted(params):
        missing, unknown = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
        raise CheckpointError(f"{path}: trained parameters do not match the model "
                              f"(missing {missing[:3]}, unexpected {unknown[:3]}); was it written with another model or LoRA setting?")
    with torch.no_grad():
        for n, p in params.items():
            if saved[n].shape != p.shape:
                raise CheckpointError(f"{path}: parameter {n} has shape {tuple(saved[n].shape)}, the model {tuple(p.shape)}")
            p.copy_(shard_like(saved[n].to(p.dtype), p))
    load_optimizer(optimizer, params, _load(path, "optimizer.safetensors"), state["optimizer_param_groups"], path)
    set_rng_state(_load(path, "rng.safetensors"), state["rng"])
    return int(state["step"])


def keep_steps_up_to(run_dir: Path, step: int) -> None:
    """Forget what steps after `step` logged (they are redone): their metrics lines, including
    a line torn by a kill, and their episode files."""
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        kept = []
        for line in metrics.read_text().splitlines():
            try:
                if int(json.loads(line)["step"]) <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                break  # a torn last line: nothing after it was written
        tmp = metrics.with_name(metrics.name + ".tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        os.replace(tmp, metrics)
    for f in (run_dir / "episodes").glob("step_*.jsonl"):
        if int(f.stem.split("_")[1]) > step:
            f.unlink()
