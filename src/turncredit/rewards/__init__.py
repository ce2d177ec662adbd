"""Reward shapers: per-step rewards computed from a whole group of episodes.

    from turncredit.rewards import diversity_rewards
"""

from turncredit.rewards.diversity import diversity_rewards, query_cost
from turncredit.rewards.shapers import SHAPERS, ShaperNeeds, diversity_shaper, shaper, shaper_needs

__all__ = ["SHAPERS", "ShaperNeeds", "diversity_rewards", "diversity_shaper", "query_cost", "shaper", "shaper_needs"]
