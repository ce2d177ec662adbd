"""Supervised warm start on chat dialogues, loss on the assistant's tokens only.

GRPO-style RL learns nothing from a group where every rollout scores the same, and an untrained
135M questioner loses every game, so the StarPO pipeline starts from an SFT checkpoint. The
dialogues are laid out in tokens exactly as rollouts lay them out (`ChatBridge.dialogue_ids`).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from turncredit.chat import message_weight
from turncredit.config import SFTConfig
from turncredit.episode import Episode
from turncredit.policy.session import PolicySession
from turncredit.precision import choose_precision
from turncredit.policy.scoring import TokenBatch, action_logprobs, autocast, model_device, pack
from turncredit.train.forward import enable_activation_checkpointing, train_top_layers
from turncredit.train.loss import aggregate
from turncredit.train.optim import adamw

Dialogue = list[dict[str, str]] | Episode  # a chat, or an episode with its own tokens


def load_dialogues(path: str | Path) -> list[Dialogue]:
    """A JSONL of `Episode`s (their `chat()`) or of `{"messages": [...]}` chats."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT data file not found: {path}")
    out: list[Dialogue] = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            if isinstance(d, dict) and "turns" in d:
                ep = Episode.from_dict(d, where=where)
                # a rollout episode already holds its exact tokens; a text-only one (the expert's
                # demonstrations) is laid out through the chat bridge
                out.append(ep if ep.token_ids() else ep.chat())
            elif isinstance(d, dict) and isinstance(d.get("messages"), list):
                out.append(_check_messages(d["messages"], where))
            else:
                raise ValueError(f"{where}: expected an Episode or an object with 'messages'")
    if not out:
        raise ValueError(f"{path}: no dialogues")
    return out


def _check_messages(messages: list, where: str) -> Dialogue:
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") in {"system", "user", "assistant"}
                and isinstance(m.get("content"), str)):
            raise ValueError(f"{where}: messages[{i}] must be {{role: system|user|assistant, content: str}}")
    targets = [message_weight(m, f"{where}: messages[{i}]") for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not any(targets):
        raise ValueError(f"{where}: no assistant message to learn from (none, or all with weight 0)")
    return messages


def _dialogue_tokens(session: PolicySession, d: Dialogue, max_length: int) -> tuple[list[int], list[int]]:
    ids, mask = (d.token_ids(), d.action_mask()) if isinstance(d, Episode) else session.bridge.dialogue_ids(d)
    return ids[:max_length], mask[:max_length]


def dialogues_to_batch(session: PolicySession, dialogues: list[Dialogue], max_length: int) -> TokenBatch:
    seqs, masks = zip(*(_dialogue_tokens(session, d, max_length) for d in dialogues))
    return pack(list(seqs), list(masks), session.pad_id)


def sft_loss(session: PolicySession, batch: TokenBatch, bf16: bool = False) -> torch.Tensor:
    """Token-mean negative log-likelihood over the assistant tokens: −Σ m·log p / Σ m."""
    with autocast(bf16):
        logp, _ = action_logprobs(session.model, batch)
    return aggregate(-logp, batch.targets.to(logp.device), "token-mean")


def sft_backward(session: PolicySession, dialogues: list[Dialogue], max_length: int, micro_batch_size: int,
                 bf16: bool = False) -> tuple[float, int]:
    """Backpropagate the batch's token-mean NLL in micro-batches; returns (loss, tokens).

    With N = Σ m over the whole batch, micro-batch j contributes (Σ_j m·(−log p)) / N, so the
    accumulated gradient is that of `sft_loss` on the batch at once. Micro-batches group
    dialogues of similar length (less padding); only one micro-batch's activations are alive.
    """
    tokens = sorted((_dialogue_tokens(session, d, max_length) for d in dialogues), key=lambda t: len(t[0]))
    size = micro_batch_size if micro_batch_size > 0 else len(tokens)
    packed = [pack([ids for ids, _ in c], [m for _, m in c], session.pad_id)
              for c in (tokens[j:j + size] for j in range(0, len(tokens), size))]
    total = sum(b.num_tokens for b in packed)
    loss = 0.0
    for b in packed:
        part = sft_loss(session, b, bf16) * (b.num_tokens / max(total, 1))  # token-mean of j × N_j / N
        part.backward()
        loss += part.item()
    return loss, total


def run_sft(
    session: PolicySession,
    dialogues: list[Dialogue],
    cfg: SFTConfig,
    seed: int = 0,
    log_path: str | Path | None = None,
) -> list[dict[str, Any]]:
    train_top_layers(session.model, cfg.trainable_layers, "sft.trainable_layers")
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(session.model)
    params = [p for p in session.model.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(seed)
    bf16 = choose_precision(cfg.bf16, model_device(session.model)).bf16
    history: list[dict[str, Any]] = []
    session.model.train()
    step = 0
    for epoch in range(cfg.epochs):
        order = list(range(len(dialogues)))
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss, tokens = sft_backward(session, [dialogues[i] for i in order[start:start + cfg.batch_size]],
                                        cfg.max_length, cfg.micro_batch_size, bf16)
            gn = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
            opt.step()
            step += 1
            rec = {"step": step, "epoch": epoch, "loss": loss, "grad_norm": gn.item(),
                   "tokens": tokens, "seconds": time.perf_counter() - t0, "bf16": bf16}
            history.append(rec)
            if log_path:
                with open(log_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    session.model.eval()
    return history
