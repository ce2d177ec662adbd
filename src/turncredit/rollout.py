"""Batched multi-turn rollouts: every active episode of a step generates together.

Episodes finish independently (a won game leaves the batch; the others go on). The context of
an episode is the running concatenation of its prompt and action token ids, so what the policy
is trained on is exactly what it saw and sampled (see `turncredit.chat`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from turncredit.chat import ChatBridge
from turncredit.envs.base import EnvFailure, MultiTurnEnv, Task
from turncredit.episode import Episode, Turn


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 50
    greedy: bool = False


@dataclass
class Generation:
    ids: list[int]
    logprobs: list[float]  # the sampler's log-probs of `ids` (after temperature / top-p)


class PolicyBackend(Protocol):
    def generate(self, contexts: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """One turn of generation for each context, stopping at the end-of-turn token."""


class HFBackend:
    """Generation with `transformers`' `generate` on left-padded batches."""

    def __init__(self, model: torch.nn.Module, bridge: ChatBridge, pad_token_id: int) -> None:
        self.model = model
        self.eot = bridge.end_of_turn_id
        self.pad = pad_token_id

    @torch.no_grad()
    def generate(self, contexts: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        from transformers import GenerationConfig

        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, ctx in enumerate(contexts):
            ids[row, width - len(ctx):] = torch.tensor(ctx)
            mask[row, width - len(ctx):] = 1
        gen_cfg = GenerationConfig(
            do_sample=not params.greedy,
            temperature=params.temperature if not params.greedy else None,
            top_p=params.top_p if not params.greedy else None,
            top_k=0 if not params.greedy else None,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eot,
            pad_token_id=self.pad,
        )
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, generation_config=gen_cfg,
            output_scores=True, return_dict_in_generate=True,
        )
        if was_training:
            self.model.train()
        new = out.sequences[:, width:]
        # scores[t] are the processed logits the sampler drew token t from
        logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
        picked = logprobs.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        results = []
        for row in range(len(contexts)):
            toks = new[row].tolist()
            if self.eot in toks:
                toks = toks[: toks.index(self.eot) + 1]
            results.append(Generation(toks, picked[row, : len(toks)].tolist()))
        return results


@dataclass
class RolloutStats:
    seconds_generate: float = 0.0
    seconds_env: float = 0.0
    tokens_generated: int = 0
    tokens_prompt: int = 0  # context tokens fed to the backend (re-prefilled each turn here)
    turns: int = 0
    aborted: int = 0
    extra: dict = field(default_factory=dict)


def task_rng(seed: int, task: Task) -> random.Random:
    """One RNG per (seed, task): every member of a group sees the very same task instance."""
    return random.Random(f"{seed}:{task.task_id}")


def run_episodes(
    env: MultiTurnEnv,
    backend: PolicyBackend,
    bridge: ChatBridge,
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    params: SamplingParams,
    seed: int,
    batch_size: int = 0,
    stats: RolloutStats | None = None,
) -> list[Episode]:
    """Play one episode per (task, group id) until each is done or hits the env's turn limit."""
    stats = stats if stats is not None else RolloutStats()
    episodes: list[Episode] = []
    states = []
    pending: list[list[int]] = []  # tokens to put before each episode's next action
    contexts: list[list[int]] = []
    for task, gid in zip(tasks, group_ids, strict=True):
        messages, state = env.reset(task, task_rng(seed, task))
        episodes.append(Episode(task=task.to_dict(), group_id=gid, messages=messages))
        states.append(state)
        opening = bridge.opening_ids(messages)
        pending.append(opening)
        contexts.append(list(opening))
    done = [False] * len(episodes)

    for _ in range(env.max_turns):
        active = [i for i, d in enumerate(done) if not d]
        if not active:
            break
        chunk = batch_size or len(active)
        for start in range(0, len(active), chunk):
            rows = active[start:start + chunk]
            t0 = time.perf_counter()
            gens = backend.generate([contexts[i] for i in rows], params)
            stats.seconds_generate += time.perf_counter() - t0
            stats.tokens_prompt += sum(len(contexts[i]) for i in rows)
            for i, gen in zip(rows, gens):
                _advance(env, bridge, episodes[i], states[i], gen, pending, contexts, i, done, stats)
    for i, ep in enumerate(episodes):
        if not done[i]:  # the env did not end it within its own turn limit
            ep.truncated = True
    return episodes


def _advance(env, bridge, ep, state, gen, pending, contexts, i, done, stats) -> None:
    ended = bool(gen.ids) and gen.ids[-1] == bridge.end_of_turn_id
    text = bridge.decode_action(gen.ids)
    t0 = time.perf_counter()
    try:
        res = env.step(state, text)
    except EnvFailure as e:
        ep.aborted = True
        ep.info["abort_reason"] = str(e)
        done[i] = True
        stats.aborted += 1
        return
    finally:
        stats.seconds_env += time.perf_counter() - t0
    info = dict(res.info)
    if not ended:
        info["truncated_action"] = True
    ep.turns.append(Turn(
        prompt_ids=pending[i], action_ids=gen.ids, sampler_logprobs=gen.logprobs,
        action_text=text, observation=res.reply, reward=res.reward, info=info,
    ))
    stats.tokens_generated += len(gen.ids)
    stats.turns += 1
    contexts[i] += gen.ids
    if res.done:
        done[i] = True
        ep.success = res.success
        ep.outcome = 1.0 if res.success else 0.0
        ep.truncated = not res.success and ep.num_turns >= env.max_turns
    else:
        pending[i] = bridge.reply_ids(res.reply, action_ended=ended)
        contexts[i] += pending[i]
