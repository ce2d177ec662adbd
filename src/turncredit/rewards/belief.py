"""ΔBelief (the CIA method): reward a question by how much its answer raised the policy's own
belief in the secret.

    log b_t = Σ_{secret tokens s} log π_θ(s | history_t, "Is it '")     (history_t: opening + t answers)
    bonus_t = λ · max(log b_t − log b_{t−1}, 0)                         for turn t = 1..T

`b_0` is scored on the opening prompt. The probe is the assistant message `Is it '{secret}'?`
appended after the generation prompt, and only the secret's own tokens are summed (found by
character offsets, so the probe is tokenised as one string). The turn that wins the game (it
names the secret) gets 0. Beliefs are scored with the current policy in batched no-grad
forwards, shortest first; each episode keeps its belief trajectory in `Episode.log_beliefs`.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from turncredit.episode import Episode
from turncredit.policy.scoring import action_logprobs, autocast, model_device, pack

PROBE = "Is it '{secret}'?"


def probe_ids(tokenizer: Any, secret: str) -> tuple[list[int], list[int]]:
    """Token ids of the probe message and a 0/1 mask over them marking the secret's tokens."""
    text = PROBE.format(secret=secret)
    start = text.index("'") + 1
    end = start + len(secret)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(a < end and b > start) for a, b in enc["offset_mapping"]]
    if not any(mask):
        raise ValueError(f"ΔBelief: no token of the secret {secret!r} found in the probe {text!r}")
    return list(enc["input_ids"]), mask


def belief_contexts(ep: Episode, bridge: Any) -> list[list[int]]:
    """The token context before each possible guess: after the opening and after each answer,
    each ending in the generation prompt (T + 1 contexts for T turns). The last one is built on
    the last turn's answer alone (`Turn.answer`): a game lost on the turn limit ends with a reply
    that names the secret, and a belief scored on it would measure the reveal, not the question."""
    contexts, prefix = [], []
    for t in ep.turns:
        contexts.append(prefix + t.prompt_ids)
        prefix = prefix + t.prompt_ids + t.action_ids
    if ep.turns:
        last = ep.turns[-1]
        ended = bool(last.action_ids) and last.action_ids[-1] == bridge.end_of_turn_id
        answer = last.observation if last.answer is None else last.answer
        contexts.append(prefix + bridge.reply_ids(answer, action_ended=ended))
    return contexts


@torch.no_grad()
def log_beliefs(model: torch.nn.Module, tokenizer: Any, bridge: Any, episodes: Sequence[Episode],
                batch_size: int = 8, bf16: bool = False) -> list[list[float]]:
    """log b_t for t = 0..T of every episode (secret from `task.data["secret"]`), batched."""
    jobs: list[tuple[int, list[int], list[int]]] = []  # (episode index, sequence, target mask)
    for e, ep in enumerate(episodes):
        ids, mask = probe_ids(tokenizer, str(ep.task.data["secret"]))
        for ctx in belief_contexts(ep, bridge):
            jobs.append((e, ctx + ids, [0] * len(ctx) + mask))
    order = sorted(range(len(jobs)), key=lambda j: len(jobs[j][1]))
    scores = [0.0] * len(jobs)
    was_training = model.training
    model.eval()
    device = model_device(model)
    pad = int(tokenizer.pad_token_id)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = pack([jobs[j][1] for j in chunk], [jobs[j][2] for j in chunk], pad).to(device)
        with autocast(bf16):
            logp, _ = action_logprobs(model, batch, 1.0)
        for j, s in zip(chunk, logp.sum(dim=1).tolist()):
            scores[j] = s
    model.train(was_training)
    out: list[list[float]] = [[] for _ in episodes]
    for (e, _, _), s in zip(jobs, scores):
        out[e].append(s)
    return out


def belief_bonus(log_b: Sequence[float], won: bool, lam: float) -> list[float]:
    """λ·max(log b_t − log b_{t−1}, 0) per turn; the winning (last) turn gets 0."""
    return gain_bonus([log_b[t + 1] - log_b[t] for t in range(len(log_b) - 1)], won, lam)


def gain_bonus(gains: Sequence[float], won: bool, lam: float) -> list[float]:
    """λ·max(Δ log b_t, 0) per turn from the belief gains; the winning (last) turn gets 0."""
    bonus = [lam * max(g, 0.0) for g in gains]
    if won and bonus:
        bonus[-1] = 0.0
    return bonus
