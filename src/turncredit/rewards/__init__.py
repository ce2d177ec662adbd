"""Reward shapers: per-step rewards computed from a whole group of episodes.

    from turncredit.rewards import diversity_rewards
"""

from turncredit.rewards.diversity import diversity_rewards, query_cost
from turncredit.rewards.shapers import SHAPERS, diversity_shaper

__all__ = ["SHAPERS", "diversity_rewards", "diversity_shaper", "query_cost"]
