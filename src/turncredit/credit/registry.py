"""The credit-estimator table and the public step-level API.

An estimator is a plain function registered by name::

    @ESTIMATORS.register("my_method")
    def my_method(group_ids, step_rewards, *, my_option=1.0) -> list[list[float]]: ...

It receives one group id and one list of per-step rewards per trajectory, and returns a ragged
list of per-step advantages with exactly the shape of `step_rewards`. `compute_advantages`
validates the inputs and options once, so estimators contain only their formula.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any, Callable, Hashable, Sequence

from turncredit.episode import Episode
from turncredit.registry import Registry, unknown_options

Estimator = Callable[..., list[list[float]]]

ESTIMATORS: Registry[Estimator] = Registry("credit estimator")

_DATA_ARGS = ("group_ids", "step_rewards")


def compute_advantages(
    name: str,
    group_ids: Sequence[Hashable],
    step_rewards: Sequence[Sequence[float]],
    **options: Any,
) -> list[list[float]]:
    """Per-step advantages from the estimator registered as `name`.

    `group_ids[i]` names the group (the task) of trajectory i and `step_rewards[i]` its per-step
    rewards; trajectories may have different numbers of steps. Returns a ragged list with the
    same shape as `step_rewards`. Unknown estimator → KeyError; unknown option → TypeError.
    """
    fn = ESTIMATORS.get(name)
    _check_options(name, fn, options)
    rewards = _check_inputs(group_ids, step_rewards)
    out = fn(list(group_ids), rewards, **options)
    _check_output(name, out, rewards)
    return out


def episode_observations(ep: Episode) -> list[str]:
    """The state each action was taken in: the opening messages and every earlier (action,
    reply) pair, as one string per turn (GiGPO's anchor-state key)."""
    head = json.dumps([[m["role"], m["content"]] for m in ep.messages], ensure_ascii=False)
    out, history = [], []
    for t in ep.turns:
        out.append(head + json.dumps(history, ensure_ascii=False))
        history.append([t.action_text, t.observation])
    return out


def episode_outcome(ep: Episode) -> float:
    """The end-of-game reward, already inside the last turn's reward: the env's
    `Turn.outcome_reward` on that turn, else that turn's whole reward before shaping."""
    if not ep.turns:
        return 0.0
    last = ep.turns[-1]
    if last.outcome_reward is not None:
        return float(last.outcome_reward)
    return float(last.env_reward if last.env_reward is not None else last.reward)


#: per-trajectory inputs an estimator may ask for by naming them as keyword parameters
EPISODE_INPUTS: dict[str, Callable[[Episode], Any]] = {
    "observations": episode_observations,
    "outcomes": episode_outcome,
}


def assign_advantages(episodes: list[Episode], name: str, **options: Any) -> None:
    """Write `Turn.advantage` on every turn of `episodes`, in place:

        A_{i,t} = estimator(rewards)_{i,t} − p_{i,t}        (p = `Turn.advantage_penalty`, 0 unless a shaper set it)

    Aborted episodes are left out of the group statistics (they are not passed to the
    estimator at all) and get advantage 0.0 on every turn. An estimator that names a key of
    `EPISODE_INPUTS` among its parameters (gigpo's `observations`) gets it from the episodes.
    """
    live = [ep for ep in episodes if not ep.aborted]
    params = inspect.signature(ESTIMATORS.get(name)).parameters
    extra = {k: [fn(ep) for ep in live] for k, fn in EPISODE_INPUTS.items() if k in params and k not in options}
    adv = compute_advantages(
        name,
        group_ids=[ep.group_id for ep in live],
        step_rewards=[ep.step_rewards for ep in live],
        **options, **extra,
    )
    for ep, ep_adv in zip(live, adv):
        for turn, a in zip(ep.turns, ep_adv):
            turn.advantage = float(a) - turn.advantage_penalty
    for ep in episodes:
        if ep.aborted:
            for turn in ep.turns:
                turn.advantage = 0.0


# --- helpers shared by estimators -------------------------------------------------------------


def group_indices(group_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """Trajectory indices of each group, groups in first-appearance order."""
    groups: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    return groups


def trajectory_returns(step_rewards: Sequence[Sequence[float]]) -> list[float]:
    """R_i = Σ_t r_{i,t} (undiscounted), one per trajectory."""
    return [math.fsum(r) for r in step_rewards]


def broadcast(values: Sequence[float], step_rewards: Sequence[Sequence[float]]) -> list[list[float]]:
    """Repeat trajectory i's single value on each of its steps."""
    return [[float(v)] * len(r) for v, r in zip(values, step_rewards)]


# --- validation -------------------------------------------------------------------------------


def _check_options(name: str, fn: Estimator, options: dict[str, Any]) -> None:
    unknown, accepted = unknown_options(fn, options, keyword_only=False, exclude=_DATA_ARGS)
    if unknown:
        raise TypeError(
            f"credit estimator {name!r} got unknown option(s) {sorted(unknown)}; "
            f"accepted: {', '.join(sorted(accepted)) or 'none'}"
        )


def _check_inputs(
    group_ids: Sequence[Hashable], step_rewards: Sequence[Sequence[float]]
) -> list[list[float]]:
    if len(group_ids) != len(step_rewards):
        raise ValueError(
            f"group_ids has {len(group_ids)} entries but step_rewards has {len(step_rewards)} "
            "trajectories; expected one group id per trajectory"
        )
    rewards: list[list[float]] = []
    for i, traj in enumerate(step_rewards):
        if isinstance(traj, (str, bytes)) or not isinstance(traj, Sequence):
            raise ValueError(
                f"step_rewards[{i}] must be a list of per-step rewards, got {type(traj).__name__}"
            )
        row = []
        for t, r in enumerate(traj):
            try:
                r = float(r)
            except (TypeError, ValueError):
                raise ValueError(
                    f"step_rewards[{i}][{t}] must be a number, got {type(r).__name__}"
                ) from None
            if not math.isfinite(r):
                raise ValueError(f"step_rewards[{i}][{t}] must be finite, got {r}")
            row.append(r)
        rewards.append(row)
    return rewards


def _check_output(name: str, out: Any, rewards: list[list[float]]) -> None:
    shape_in = [len(r) for r in rewards]
    try:
        shape_out = [len(a) for a in out]
    except TypeError:
        shape_out = None
    if shape_out != shape_in:
        raise RuntimeError(
            f"credit estimator {name!r} returned advantages of shape {shape_out}, "
            f"expected the shape of step_rewards {shape_in}"
        )
