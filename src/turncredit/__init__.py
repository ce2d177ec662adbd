"""turncredit: multi-turn LLM agent RL with credit assignment across turns."""

from turncredit.episode import Episode, Turn, read_episodes, write_episodes

__all__ = ["Episode", "Turn", "read_episodes", "write_episodes"]
__version__ = "0.1.0"
