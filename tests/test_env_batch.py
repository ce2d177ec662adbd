"""A turn's environment calls go out together, and finished episodes leave the generation batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from turncredit.chat import ChatBridge
from turncredit.envs.base import EnvFailure, MultiTurnEnv, StepResult, Task
from turncredit.policy.backends import BACKENDS, KVCacheBackend, SamplingParams
from turncredit.rollout import RolloutStats, resolve_refill, run_episodes


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
        return ([{"role": "system", "content": "Toy."},
                 {"role": "user", "content": f"Go {task.task_id}" + " x" * task.data.get("pad", 0)}],
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
    """Records which rows each turn generates for and how many rows the batch tensors hold then."""

    def start(self, n_rows, seed):
        state = super().start(n_rows, seed)
        calls = self.calls = []
        inner = state.generate

        def generate(rows, new_tokens, params):
            out = inner(rows, new_tokens, params)
            calls.append((list(rows), int(state.mask.shape[0]), len(state.slot)))
            return out

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
    assert eps[2].aborted and "tool down for c" in eps[2].abort_reason
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


def test_a_finished_episode_s_row_goes_to_the_next_waiting_one(tiny_policy, smol_tokenizer):
    """Continuous batching: at most `batch_size` episodes play at once, and each turn's finished
    ones are replaced by waiting ones, in task order, without the batch tensors ever growing."""
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task(str(i), {"lifetime": n}) for i, n in enumerate([1, 3, 2, 1, 2])]
    env = ToyEnv(ToyOptions(max_turns=6))
    backend = SpyKV(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id)
    eps = run_episodes(env, backend, bridge, tasks, ["g"] * 5, SamplingParams(max_new_tokens=2), seed=0,
                       batch_size=2)
    assert env.batches == [["0", "1"], ["1", "2"], ["1", "2"], ["3", "4"], ["4"]]
    assert [held for _, held, _ in backend.calls] == [2, 2, 2, 2, 1]
    assert [e.task.task_id for e in eps] == ["0", "1", "2", "3", "4"]
    assert [e.num_turns for e in eps] == [1, 3, 2, 1, 2] and all(e.success for e in eps)
    assert all(f"Go {i}" in bridge.tokenizer.decode(e.turns[0].prompt_ids) for i, e in enumerate(eps))


def test_without_refill_the_next_batch_starts_when_the_whole_batch_has_ended(tiny_policy, smol_tokenizer):
    """Fixed batches (a CPU's default): the rows of a batch that ended early stay empty until its
    longest episode ends; then the next `batch_size` episodes start together."""
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task(str(i), {"lifetime": n}) for i, n in enumerate([1, 3, 2, 1, 2])]
    env = ToyEnv(ToyOptions(max_turns=6))
    backend = SpyKV(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id)
    eps = run_episodes(env, backend, bridge, tasks, ["g"] * 5, SamplingParams(max_new_tokens=2), seed=0,
                       batch_size=2, refill=False)
    assert env.batches == [["0", "1"], ["1"], ["1"], ["2", "3"], ["2"], ["4"], ["4"]]
    assert [e.task.task_id for e in eps] == ["0", "1", "2", "3", "4"]
    assert [e.num_turns for e in eps] == [1, 3, 2, 1, 2] and all(e.success for e in eps)


def test_continuous_batching_auto_is_on_for_an_accelerator_and_off_for_a_cpu():
    import torch

    assert resolve_refill("auto", torch.device("cpu")) is False
    assert resolve_refill("auto", torch.device("cuda", 0)) is True and resolve_refill("auto", "cuda:1") is True
    assert resolve_refill(True, "cpu") is True and resolve_refill(False, "cuda") is False
    with pytest.raises(ValueError, match="rollout.continuous_batching"):
        resolve_refill("sometimes", "cpu")


@pytest.mark.parametrize("refill", [True, False])
@pytest.mark.parametrize("backend_name", ["kv", "recompute"])
def test_continuous_batching_samples_what_one_batch_of_all_samples(tiny_policy, smol_tokenizer, backend_name,
                                                                   refill):
    """Greedy play with 2 rows, refilled as episodes end or in fixed batches, equals all 6
    episodes in one batch: a joining episode's opening (here longer than the batch's whole
    cache, so it widens) is encoded on its own and moved into a freed row without disturbing the
    others."""
    bridge = ChatBridge(smol_tokenizer)
    tasks = [Task(str(i), {"lifetime": n, "pad": p}) for i, (n, p) in
             enumerate([(1, 0), (3, 2), (2, 60), (1, 5), (3, 0), (2, 9)])]

    def play(batch_size):
        env = ToyEnv(ToyOptions(max_turns=4))
        backend = BACKENDS.get(backend_name)(tiny_policy, bridge.end_of_turn_id, smol_tokenizer.pad_token_id)
        eps = run_episodes(env, backend, bridge, tasks, ["g"] * 6, SamplingParams(max_new_tokens=3, greedy=True),
                           seed=0, batch_size=batch_size, refill=refill)
        return [[(t.prompt_ids, t.action_ids, t.sampler_logprobs) for t in e.turns] for e in eps]

    together, refilled = play(0), play(2)
    for a, b in zip(together, refilled, strict=True):
        assert [(p, ids) for p, ids, _ in a] == [(p, ids) for p, ids, _ in b]
        assert max(abs(x - y) for (_, _, la), (_, _, lb) in zip(a, b) for x, y in zip(la, lb)) < 1e-4
