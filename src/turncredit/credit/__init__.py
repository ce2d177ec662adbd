"""Credit assignment: per-step advantages from per-step rewards, one registered function each.

    from turncredit.credit import compute_advantages
    adv = compute_advantages("grpo", group_ids=["q1", "q1"], step_rewards=[[0.0, 1.0], [0.0]])
"""

from turncredit.credit import grpo as _grpo  # noqa: F401  (registers "grpo")
from turncredit.credit import rloo as _rloo  # noqa: F401  (registers "rloo")
from turncredit.credit import spa as _spa  # noqa: F401  (registers "spa")
from turncredit.credit import turn_grpo as _turn_grpo  # noqa: F401  (registers "turn_grpo")
from turncredit.credit import gigpo as _gigpo  # noqa: F401  (registers "gigpo")
from turncredit.credit import process_grpo as _process_grpo  # noqa: F401  (registers "process_grpo")
from turncredit.credit import turn_reinforce as _turn_reinforce  # noqa: F401  (registers "turn_reinforce")
from turncredit.credit.filters import group_reward_std, variance_filter
from turncredit.credit.registry import EPISODE_INPUTS, ESTIMATORS, assign_advantages, compute_advantages

__all__ = [
    "EPISODE_INPUTS",
    "ESTIMATORS",
    "assign_advantages",
    "compute_advantages",
    "group_reward_std",
    "variance_filter",
]
