"""20 Questions (questioner agent): environment, WordNet oracle, word lists, expert."""

from turncredit.envs.twenty_questions.env import (
    DEFAULT_SYSTEM_PROMPT,
    TwentyQuestionsEnv,
    TwentyQuestionsOptions,
    TwentyQuestionsState,
)
from turncredit.envs.twenty_questions.expert import ExpertQuestioner
from turncredit.envs.twenty_questions.llm_judge import LLMJudgeOracle
from turncredit.envs.twenty_questions.oracle import ORACLES, Oracle, OracleAnswer, WordNetOracle
from turncredit.envs.twenty_questions.wordnet import load_wordnet
from turncredit.envs.twenty_questions.words import SecretWord, default_words_path, load_words

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ORACLES",
    "ExpertQuestioner",
    "LLMJudgeOracle",
    "Oracle",
    "OracleAnswer",
    "SecretWord",
    "TwentyQuestionsEnv",
    "TwentyQuestionsOptions",
    "TwentyQuestionsState",
    "WordNetOracle",
    "default_words_path",
    "load_words",
    "load_wordnet",
]
