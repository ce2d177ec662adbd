"""Batched multi-turn rollouts: every active episode of a step generates together.

Episodes finish independently (a won game leaves the batch; the others go on). A turn's
oracle or tool calls go to the environment together (`MultiTurnEnv.step_batch`). The context of
an episode is the running concatenation of its prompt and action token ids, so what the policy
is trained on is exactly what it saw and sampled (see `turncredit.chat`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from turncredit.chat import ChatBridge
from turncredit.envs.base import EnvFailure, MultiTurnEnv, StepResult, Task
from turncredit.episode import Episode, Turn
from turncredit.policy.backends import Generation, GenerationState, PolicyBackend, SamplingParams

__all__ = ["RolloutStats", "SamplingParams", "even_batches", "run_episodes", "task_rng"]


@dataclass
class RolloutStats:
    seconds_generate: float = 0.0
    seconds_env: float = 0.0
    tokens_generated: int = 0
    tokens_prompt: int = 0  # prompt/reply tokens appended to the contexts
    tokens_prefilled: int = 0  # tokens the backend actually encoded for them (shared prefixes once)
    turns: int = 0
    aborted: int = 0


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
    on_finished: Callable[[int], None] | None = None,
) -> list[Episode]:
    """Play one episode per (task, group id) until each is done or hits the env's turn limit.

    Episodes are cut into batches of at most `batch_size` (0 = one batch), as even as possible
    (`even_batches`); within a batch all active episodes generate together and a finished one
    leaves the batch at once. `on_finished(n)` is told after every turn how many episodes just
    ended (for a progress bar).
    """
    stats = stats if stats is not None else RolloutStats()
    pairs = list(zip(tasks, group_ids, strict=True))
    episodes: list[Episode] = []
    for b, part in enumerate(even_batches(len(pairs), batch_size)):
        episodes += _run_batch(env, backend, bridge, pairs[part.start:part.stop], params, seed, b, stats,
                               on_finished or (lambda n: None))
    return episodes


def even_batches(n: int, batch_size: int) -> list[range]:
    """⌈n / batch_size⌉ consecutive batches whose sizes differ by at most one (0 = one batch).

    200 games at batch 64 play as 4 × 50, not 64 + 64 + 64 + 8: a last batch of 8 would run
    its 20 turns at a batch size where a decode step costs nearly what a full one does, and
    the largest batch, which sets the KV cache's peak memory, is 22 % smaller.
    """
    if n <= 0:
        return []
    count = -(-n // batch_size) if batch_size > 0 else 1
    base, extra = divmod(n, count)
    bounds = [0]
    for i in range(count):
        bounds.append(bounds[-1] + base + (i < extra))
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def _run_batch(env, backend, bridge, pairs, params, seed, batch_no, stats, on_finished) -> list[Episode]:
    episodes: list[Episode] = []
    states = []
    pending: list[list[int]] = []  # tokens to put before each episode's next action
    for task, gid in pairs:
        messages, state = env.reset(task, task_rng(seed, task))
        episodes.append(Episode(task=task.to_dict(), group_id=gid, messages=messages))
        states.append(state)
        pending.append(bridge.opening_ids(messages))
    done = [False] * len(episodes)
    gen_state: GenerationState = backend.start(len(episodes), seed=seed * 1009 + batch_no)
    for _ in range(env.max_turns):
        rows = [i for i, d in enumerate(done) if not d]
        if not rows:
            break
        t0 = time.perf_counter()
        gens = gen_state.generate(rows, [pending[i] for i in rows], params)
        stats.seconds_generate += time.perf_counter() - t0
        stats.tokens_prompt += sum(len(pending[i]) for i in rows)
        texts = [bridge.decode_action(gen.ids) for gen in gens]
        t0 = time.perf_counter()
        results = env.step_batch([states[i] for i in rows], texts)
        stats.seconds_env += time.perf_counter() - t0
        finished = []
        for i, gen, text, res in zip(rows, gens, texts, results, strict=True):
            _advance(env, bridge, episodes[i], gen, text, res, pending, i, done, stats)
            if done[i]:
                finished.append(i)
        gen_state.finish(finished)
        on_finished(len(finished))
    stats.tokens_prefilled += getattr(gen_state, "tokens_prefilled", 0)
    for i, ep in enumerate(episodes):
        if not done[i]:  # the env did not end it within its own turn limit
            ep.truncated = True
    on_finished(done.count(False))
    return episodes


def _advance(env, bridge, ep, gen: Generation, text: str, res: StepResult | EnvFailure,
             pending, i, done, stats) -> None:
    if isinstance(res, EnvFailure):
        ep.aborted = True
        ep.info["abort_reason"] = str(res)
        done[i] = True
        stats.aborted += 1
        return
    ended = bool(gen.ids) and gen.ids[-1] == bridge.end_of_turn_id
    info = dict(res.info)
    if not ended:
        info["truncated_action"] = True
    ep.turns.append(Turn(
        prompt_ids=pending[i], action_ids=gen.ids, sampler_logprobs=gen.logprobs,
        action_text=text, observation=res.reply, reward=res.reward, info=info, answer=res.answer,
        belief_gain=res.belief_gain,
    ))
    stats.tokens_generated += len(gen.ids)
    stats.turns += 1
    if res.done:
        done[i] = True
        ep.success = res.success
        ep.outcome = 1.0 if res.success else 0.0
        ep.truncated = not res.success and ep.num_turns >= env.max_turns
    else:
        pending[i] = bridge.reply_ids(res.reply, action_ended=ended)
