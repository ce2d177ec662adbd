"""Reward shapers on a step's episodes, registered by name (`algo.reward_shaper`).

A shaper sees the whole step (groups included) and adds to `Turn.reward` in place; the
environment's own reward stays in `Turn.env_reward`, so shaping twice gives the same result,
and each turn's bonus goes in `Turn.info` under the shaper's key for people reading episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from turncredit.envs.multi_answer_qa.env import QARecord
from turncredit.episode import Episode
from turncredit.registry import Registry
from turncredit.rewards.diversity import diversity_rewards, query_cost

Shaper = Callable[..., None]
SHAPERS: Registry[Shaper] = Registry("reward shaper")


@dataclass(frozen=True)
class ShaperNeeds:
    """What a shaper needs beyond a step's episodes, declared where it is registered."""

    policy: bool = False  # called with `policy=` (the trainer's policy session): it scores with the model
    task_fields: tuple[str, ...] = ()  # fields every task must carry (checked against the env before a run)


_NEEDS: dict[str, ShaperNeeds] = {}


def shaper(name: str, needs: ShaperNeeds = ShaperNeeds()) -> Callable[[Shaper], Shaper]:
    """Register a shaper under `name` with what it needs."""
    def register(fn: Shaper) -> Shaper:
        _NEEDS[name] = needs
        return SHAPERS.register(name)(fn)
    return register


def shaper_needs(name: str) -> ShaperNeeds:
    SHAPERS.get(name)  # an unknown name: the registry's error listing the known ones
    return _NEEDS[name]


@shaper("none")
def no_shaping(episodes: Sequence[Episode], step: int) -> None:
    """Train on the environment's rewards as they are."""


def add_step_bonus(episodes: Sequence[Episode], bonus: Sequence[Sequence[float]], key: str) -> None:
    for ep, row in zip(episodes, bonus, strict=True):
        for turn, x in zip(ep.turns, row, strict=True):
            if turn.env_reward is None:  # a hand-made turn: its reward is the environment's
                turn.env_reward = turn.reward
            base = turn.env_reward
            turn.info[key] = float(x)  # for reading only
            turn.reward = base + float(x)


@shaper("diversity", ShaperNeeds(task_fields=("answers",)))
def diversity_shaper(
    episodes: Sequence[Episode], step: int, *, alpha: float = 1.0, beta: float = 4.0, lam: float = 1.0,
    cost: float = 0.01, cost_warmup: int = 100, cost_ramp: int = 100,
) -> None:
    """SPADER's exploration reward (`diversity_rewards`), the query cost ramped in by training
    step (`query_cost`; `step` counts from 1). Reads what the QA environment records per turn
    (`QARecord.retrieved_gold` and `.queries`); gold entities are `task.data["answers"][*]["name"]`.
    Aborted episodes are left out of the group counts N(e) and are not shaped."""
    live = [ep for ep in episodes if not ep.aborted]
    c = query_cost(step - 1, cost, cost_warmup, cost_ramp)
    records = [[QARecord.of(t) for t in ep.turns] for ep in live]
    bonus = diversity_rewards(
        group_ids=[ep.group_id for ep in live],
        gold=[[a["name"] for a in ep.task.data.get("answers", [])] for ep in live],
        retrieved=[[r.retrieved_gold for r in recs] for recs in records],
        queries=[[r.queries for r in recs] for recs in records],
        alpha=alpha, beta=beta, lam=lam, cost=c,
    )
    add_step_bonus(live, bonus, "exploration_reward")


@shaper("query_cost", ShaperNeeds(task_fields=("answers",)))
def query_cost_shaper(episodes: Sequence[Episode], step: int, *, cost: float = 0.01, cost_warmup: int = 100,
                      cost_ramp: int = 100) -> None:
    """SPADER's GRPO baseline: reward = F1 − c·Q/|GT| for an episode of Q queries in all, with
    c ramped in as in `diversity` (`query_cost`). Charged where the queries are issued,
    −c·q_t/|GT| on each search turn, so a trajectory's total is F1 − c·Q/|GT|."""
    c = query_cost(step - 1, cost, cost_warmup, cost_ramp)
    live = [ep for ep in episodes if not ep.aborted]
    bonus = [[-c * QARecord.of(t).queries / max(1, len(ep.task.data.get("answers", []))) for t in ep.turns]
             for ep in live]
    add_step_bonus(live, bonus, "query_cost")


@shaper("belief", ShaperNeeds(policy=True, task_fields=("secret",)))
def belief_shaper(episodes: Sequence[Episode], step: int, *, policy: Any, lam: float = 0.1,
                  batch_size: int = 8) -> None:
    """ΔBelief (CIA): λ·max(Δ log b, 0) per turn, beliefs in `task.data["secret"]` scored with the
    current policy (`turncredit.rewards.belief`). Aborted episodes are not shaped."""
    from turncredit.rewards.belief import belief_bonus, log_beliefs

    live = [ep for ep in episodes if not ep.aborted and ep.turns]
    beliefs = log_beliefs(policy.model, policy.tokenizer, policy.bridge, live, batch_size=batch_size)
    for ep, log_b in zip(live, beliefs):
        ep.log_beliefs = log_b
    add_step_bonus(live, [belief_bonus(b, ep.success, lam) for ep, b in zip(live, beliefs)], "belief_reward")


@shaper("exact_belief")
def exact_belief_shaper(episodes: Sequence[Episode], step: int, *, lam: float = 1.0, idle_cost: float = 0.0,
                        idle_cost_on: str = "reward") -> None:
    """ΔBelief with the environment's exact posterior instead of the policy's estimate:

        bonus_t = λ·max(Δ log b_t, 0) − c·[Δ log b_t = 0 and turn t does not win]

    Δ log b_t = `Turn.belief_gain` (20 Questions with listed candidates: log(|C_{t−1}| / |C_t|)
    over the listed words consistent with the answers); the winning turn gets 0, as in CIA
    (`belief_bonus`). A turn that gains nothing asked a question whose answer the earlier
    answers already determined (a guess outside the list or of a word ruled out, a category
    none of the remaining words differ on, a repeat): `idle_cost` c charges it, as the game's
    repeat penalty charges a literal repeat. `idle_cost_on` says where: "reward" (in the bonus
    above, so the estimator's baseline sees it) or "advantage" (`Turn.advantage_penalty`: taken
    off the turn's advantage after the estimator, so it reaches an idle turn even when every
    peer at that turn was idle too — a group-centred cost cancels there, benchmarks/
    20q-learning-diagnosis.md K). No forward passes: the environment computes the gains while it
    answers. Aborted episodes are not shaped."""
    from turncredit.rewards.belief import gain_bonus

    if idle_cost_on not in ("reward", "advantage"):
        raise ValueError(f"exact_belief: idle_cost_on must be 'reward' or 'advantage', got {idle_cost_on!r}")
    live = [ep for ep in episodes if not ep.aborted and ep.turns]
    for ep in live:
        if any(t.belief_gain is None for t in ep.turns):
            raise ValueError(
                f"reward shaper 'exact_belief': episode {ep.group_id!r} has turns without an exact belief "
                "gain; the environment must compute one (twenty_questions: env.options.num_candidates > 0 "
                "and env.options.exact_belief: true)"
            )
    on_reward = idle_cost if idle_cost_on == "reward" else 0.0
    on_advantage = idle_cost - on_reward
    bonus = []
    for ep in live:
        gains = [float(t.belief_gain) for t in ep.turns]  # type: ignore[arg-type]
        row = gain_bonus(gains, ep.success, lam)
        idle = [g <= 0.0 and not (ep.success and t == len(gains) - 1) for t, g in enumerate(gains)]
        bonus.append([b - on_reward * i for b, i in zip(row, idle)])
        for turn, i in zip(ep.turns, idle):
            turn.advantage_penalty = on_advantage * i
    add_step_bonus(live, bonus, "belief_reward")
