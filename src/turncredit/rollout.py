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
from turncredit.episode import Episode
from turncredit.generation import Generation, GenerationState, PolicyBackend, SamplingParams

__all__ = ["RolloutStats", "SamplingParams", "resolve_refill", "run_episodes", "task_rng"]


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


def resolve_refill(setting: bool | str, device: object) -> bool:
    """`rollout.continuous_batching`: an explicit true/false wins; "auto" refills rows on an
    accelerator, where a decode step costs about the same at 5 rows as at 40, and not on a CPU,
    where it costs in proportion to the rows, so refilling only adds separate prefills and cache
    rows of unequal length (measured slower: benchmarks/continuous-batching-cpu.md)."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"rollout.continuous_batching: expected true, false or 'auto', got {setting!r}")
    return str(device).split(":")[0] != "cpu"  # a torch.device or its name


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
    refill: bool = True,
) -> list[Episode]:
    """Play one episode per (task, group id) until each is done or hits the env's turn limit.

    At most `batch_size` episodes play at once (0 = all); each turn every playing episode
    generates together and a finished one leaves the batch at once. With `refill` the next
    waiting episode takes a freed row at once (continuous batching: the batch stays full until
    the work runs out); without it the next `batch_size` episodes start when the whole batch has
    ended (fixed batches, no rows of unequal history in one cache). `on_finished(n)` is told
    after every turn how many episodes just ended (for a progress bar).
    """
    stats = stats if stats is not None else RolloutStats()
    on_finished = on_finished or (lambda n: None)
    pairs = list(zip(tasks, group_ids, strict=True))
    if not pairs:
        return []
    size = len(pairs) if batch_size <= 0 else min(batch_size, len(pairs))
    episodes: list[Episode] = []
    states: list = []
    pending: list[list[int]] = []  # tokens to put before each episode's next action
    done: list[bool] = []

    def admit(rows: list[int]) -> None:
        for r in rows:
            if r != len(episodes):
                raise RuntimeError(f"backend opened row {r} for episode {len(episodes)}: rows must be the next ids")
            task, gid = pairs[r]
            messages, state = env.reset(task, task_rng(seed, task))
            episodes.append(Episode(task=task, group_id=gid, messages=messages))
            states.append(state)
            pending.append(bridge.opening_ids(messages))
            done.append(False)

    gen_state: GenerationState = backend.start(size, seed=seed * 1009)
    admit(list(range(size)))
    playing = list(range(size))
    while playing:
        t0 = time.perf_counter()
        gens = gen_state.generate(playing, [pending[i] for i in playing], params)
        stats.seconds_generate += time.perf_counter() - t0
        stats.tokens_prompt += sum(len(pending[i]) for i in playing)
        texts = [bridge.decode_action(gen.ids) for gen in gens]
        t0 = time.perf_counter()
        results = env.step_batch([states[i] for i in playing], texts)
        stats.seconds_env += time.perf_counter() - t0
        for i, gen, text, res in zip(playing, gens, texts, results, strict=True):
            _advance(env, bridge, episodes[i], gen, text, res, pending, i, done, stats)
            if not done[i] and episodes[i].num_turns >= env.max_turns:
                done[i] = episodes[i].truncated = True  # the env did not end it within its own turn limit
        finished = [i for i in playing if done[i]]
        gen_state.finish(finished)
        on_finished(len(finished))
        playing = [i for i in playing if not done[i]]
        waiting = len(pairs) - len(episodes)
        if waiting and ((refill and finished) or not playing):
            new = gen_state.add_rows(min(size - len(playing), waiting))
            admit(new)
            playing += new
    stats.tokens_prefilled += getattr(gen_state, "tokens_prefilled", 0)
    return episodes


def _advance(env, bridge, ep, gen: Generation, text: str, res: StepResult | EnvFailure,
             pending, i, done, stats) -> None:
    if isinstance(res, EnvFailure):
        ep.aborted = True
        ep.abort_reason = str(res)
        done[i] = True
        stats.aborted += 1
        return
    ended = bool(gen.ids) and gen.ids[-1] == bridge.end_of_turn_id
    ep.turns.append(res.to_turn(text, prompt_ids=pending[i], action_ids=gen.ids, sampler_logprobs=gen.logprobs,
                                truncated_action=not ended))
    stats.tokens_generated += len(gen.ids)
    stats.turns += 1
    if res.done:
        done[i] = True
        ep.success = res.success
        ep.outcome = 1.0 if res.success else 0.0
        ep.truncated = not res.success and ep.num_turns >= env.max_turns
    else:
        pending[i] = bridge.reply_ids(res.reply, action_ended=ended)
