"""A turn's environment calls go out together, and finished episodes leave the generation batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from turncredit.chat import ChatBridge
from turncredit.envs.base import EnvFailure, MultiTurnEnv, StepResult, Task
from turncredit.policy.backends import KVCacheBackend, SamplingParams
from turncredit.rollout import RolloutStats, even_batches, run_episodes


@dataclass
class ToyOptions:
    max_turns: int = 6
    concurrency: int = 1


class ToyEnv(MultiTurnEnv):
    """Episode `k` lasts `lifetime` turns; `fail_at` makes its tool fail on that turn."""

    Options = ToyOptions

    def __init__(self, options, barrier: threading.Barrier | None = None) -> None:
        super().__init__(options)
        self.barrier = barrier
        self.batches: list[list[str]] = []  # task ids per step_batch call

    def tasks(self, split):
        return []

    def reset(self, task, rng):
        return ([{"role": "system", "content": "Toy."}, {"role": "user", "content": f"Go {task.task_id}"}],
                {"id": task.task_id, "turns": 0, **task.data})

    def step_batch(self, states, actions):
        self.batches.append([s["id"] for s in states])
        return super().step_batch(states, actions)

    def step(self, state, action_text):
        if self.barrier is not None:
            self.barrier.wait()  # passes only when every call of the turn is in flight at once
        state["turns"] += 1
        if state.get("fail_at") == state["turns"]:
            raise EnvFailure(f"tool down for {state['id']}")
        done = state["turns"] >= state["lifetime"]
        return StepResult(reply=f"{state['id']}:{state['turns']}", reward=0.0, done=done, success=done)


def _states(n):
    return [{"id": f"t{i}", "turns": 0, "lifetime": 9} for i in range(n)]


def test_step_batch_overlaps_calls_and_keeps_the_order():
    env = ToyEnv(ToyOptions(concurrency=4), barrier=threading.Barrier(4, timeout=5))
    out = env.step_batch(_states(4), ["a"] * 4)
    assert [r.reply for r in out] == ["t0:1", "t1:1", "t2:1", "t3:1"]


def test_step_batch_runs_serially_by_default():
    # with concurrency 1 the calls never overlap, so a 2-party barrier cannot be passed
    env = ToyEnv(ToyOptions(concurrency=1), barrier=threading.Barrier(2, timeout=0.2))
    with pytest.raises(threading.BrokenBarrierError):
        env.step_batch(_states(2), ["a", "b"])


def test_step_batch_returns_a_failure_for_its_row_only():
    env = ToyEnv(ToyOptions(concurrency=3))
    states = _states(3)
    states[1]["fail_at"] = 1
    out = env.step_batch(states, ["a"] * 3)
    assert isinstance(out[1], EnvFailure) and "t1" in str(out[1])
    assert [out[0].reply, out[2].reply] == ["t0:1", "t2:1"]


def test_step_batch_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="2 states but 1 actions"):
        ToyEnv(ToyOptions()).step_batch(_states(2), ["a"])


class SpyKV(KVCacheBackend):
    """Records which rows each turn generates for and how many rows the batch tensors hold."""

    def start(self, n_rows, seed):
        state = super().start(n_rows, seed)
        calls = self.calls = []
        inner = state.generate

        def generate(rows, new_tokens, params):
            calls.append((list(rows), int(state.mask.shape[0]), len(state.slot)))
            return inner(rows, new_tokens, params)

        state.generate = generate
        return state


def test_finished_and_failed_episodes_leave_the_batch(tiny_policy, smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task("a", {"lifetime": 1}), Task("b", {"lifetime": 3}),
             Task("c", {"lifetime": 9, "fail_at": 2}), Task("d", {"lifetime": 4})]
    env = ToyEnv(ToyOptions(max_turns=6, concurrency=2))
    backend = SpyKV(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id)
    stats = RolloutStats()
    eps = run_episodes(env, backend, bridge, tasks, ["g"] * 4, SamplingParams(max_new_tokens=3), seed=0, stats=stats)

    # one environment call per turn, holding exactly the episodes still playing
    assert env.batches == [["a", "b", "c", "d"], ["b", "c", "d"], ["b", "d"], ["d"]]
    # and the generation batch shrinks with them: rows asked for == rows held in the KV tensors
    assert [(rows, held) for rows, held, _ in backend.calls] == [
        ([0, 1, 2, 3], 4), ([1, 2, 3], 3), ([1, 3], 2), ([3], 1)]
    assert [slots for _, _, slots in backend.calls] == [4, 3, 2, 1]
    assert [e.num_turns for e in eps] == [1, 3, 1, 4]
    assert eps[2].aborted and "tool down for c" in eps[2].info["abort_reason"]
    assert not any(e.aborted for e in (eps[0], eps[1], eps[3]))
    assert all(e.success for e in (eps[0], eps[1], eps[3])) and stats.aborted == 1
    assert stats.turns == 1 + 3 + 1 + 4


def test_rollout_with_concurrent_env_equals_serial(tiny_policy, smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task(str(i), {"lifetime": 1 + i % 3}) for i in range(5)]

    def play(concurrency):
        env = ToyEnv(ToyOptions(max_turns=4, concurrency=concurrency))
        backend = KVCacheBackend(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id)
        eps = run_episodes(env, backend, bridge, tasks, ["g"] * 5, SamplingParams(max_new_tokens=4), seed=3)
        return [[(t.action_ids, t.observation) for t in e.turns] for e in eps]

    assert play(1) == play(4)


def test_even_batches_split_the_episodes_as_evenly_as_the_cap_allows():
    assert [len(r) for r in even_batches(200, 64)] == [50, 50, 50, 50]
    assert [len(r) for r in even_batches(10, 4)] == [4, 3, 3]
    assert even_batches(7, 0) == [range(0, 7)] and even_batches(0, 8) == []
    parts = even_batches(131, 32)
    assert parts[0].start == 0 and parts[-1].stop == 131
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:])) and max(map(len, parts)) <= 32


def test_the_rollout_plays_its_episodes_in_even_batches(tiny_policy, smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task(str(i), {"lifetime": 1}) for i in range(5)]
    env = ToyEnv(ToyOptions(max_turns=2))
    eps = run_episodes(env, KVCacheBackend(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id),
                       bridge, tasks, ["g"] * 5, SamplingParams(max_new_tokens=2), seed=0, batch_size=4)
    assert env.batches == [["0", "1", "2"], ["3", "4"]]  # 3 + 2, not 4 + 1
    assert [e.task["task_id"] for e in eps] == ["0", "1", "2", "3", "4"]
