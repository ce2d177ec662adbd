"""Expert takeovers of the policy's own games: DAgger's relabelling, and guided group members.

A small policy's own rollouts rarely show it what to do after its mistakes (a repeated question,
a guess outside the list): the policy gradient can only push down what it sampled. In an
expert takeover the policy's game is replayed up to turn t ~ U{1, …, T−1} and the environment's
scripted expert plays on from the state the policy reached (Ross et al. 2011, DAgger).

`guided_members` turns takeovers into extra members of RL groups: a group's game up to t, then
the expert. The group is mixed on- and off-policy, as LUFFY (Yan et al. 2025) mixes expert
traces into GRPO's groups, but from the policy's own states: the credit estimator scores the
expert's turns against its peers' turns at the same index, and the update trains on the
expert's turns only (the first t are the peer's, trained on as that peer's:
`Episode.expert_from`). π_old of an expert token is the trainer's own log-prob, so its PPO
ratio starts at 1, and a positive advantage is an imitation step weighted by how much better
the expert's continuation did than the group.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from typing import Any, Callable, Sequence

from turncredit.chat import ChatBridge
from turncredit.episode import Episode
from turncredit.rollout import task_rng

__all__ = ["check_can_take_over", "expert_takeover", "guided_members"]


def check_can_take_over(play: Callable[..., Episode] | None, env: Any, option: str) -> None:
    """An expert that takes over must continue a game (`play(..., prefix=)`); `option` names
    the setting that asked for one in the error."""
    if play is None or "prefix" not in inspect.signature(play).parameters:
        raise ValueError(f"{option}: the expert of environment {type(env).__name__} cannot take over a game "
                         "(it has no play() with prefix=); set it to 0")


def expert_takeover(play: Callable[..., Episode], env: Any, ep: Episode, t: int, seed: int) -> Episode | None:
    """The expert's game from `ep`'s state after its first `t` turns: a text-only Episode whose
    first t turns replay `ep`'s (same task instance: `task_rng(seed, task)`, as the rollout
    played it), or None when the game ended within them."""
    taken = play(env, ep.task, task_rng(seed, ep.task), prefix=[turn.action_text for turn in ep.turns[:t]])
    replayed, played = [turn.label for turn in taken.turns[:t]], [turn.label for turn in ep.turns[:t]]
    if replayed != played:
        raise RuntimeError(f"expert takeover: replaying the policy's game on {ep.task.task_id!r} got other answers "
                           f"({replayed} against {played}): the environment is not deterministic")
    return None if taken.num_turns == t else taken


def guided_members(env: Any, bridge: ChatBridge, episodes: Sequence[Episode], per_group: int,
                   rng: random.Random, seed: int, expert_options: dict[str, Any] | None = None) -> list[Episode]:
    """Up to `per_group` guided members for each group of `episodes` (played with rollout seed
    `seed`): a member's game to t ~ U{1, …, T−1}, then the expert's (`env.expert(**expert_options)`).
    Lost games are taken over first (where the policy's own continuation failed); the rest in
    `rng`'s order."""
    if per_group <= 0:
        return []
    play = env.expert(**(expert_options or {}))
    check_can_take_over(play, env, "algo.expert_guidance")
    groups: dict[str, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep)
    out = []
    for members in groups.values():
        candidates = [ep for ep in members if not ep.aborted and ep.expert_from is None and ep.num_turns >= 2]
        rng.shuffle(candidates)
        candidates.sort(key=lambda ep: ep.success)  # stable: lost games first, shuffled within
        for ep in candidates[:per_group]:
            t = rng.randint(1, ep.num_turns - 1)
            taken = expert_takeover(play, env, ep, t, seed)
            if taken is not None:
                out.append(_with_tokens(bridge, ep, taken, t))
    return out


def _with_tokens(bridge: ChatBridge, ep: Episode, taken: Episode, t: int) -> Episode:
    """`ep`'s first t turns (copies: the credit stage writes each turn's advantage), then the
    expert's turns in the tokens a rollout would hold: the reply to the turn before as prompt,
    the expert's question and the end-of-turn token as action."""
    turns = [dataclasses.replace(turn) for turn in ep.turns[:t]]
    prompt = ep.turns[t].prompt_ids  # the reply to turn t − 1, as the policy saw it
    for turn in taken.turns[t:]:
        turns.append(dataclasses.replace(turn, prompt_ids=list(prompt), action_ids=bridge.action_ids(turn.action_text),
                                         sampler_logprobs=[]))
        prompt = bridge.reply_ids(turn.observation, action_ended=True)
    return Episode(task=ep.task, group_id=ep.group_id, messages=ep.messages, turns=turns, outcome=taken.outcome,
                   success=taken.success, truncated=taken.truncated, expert_from=t)
