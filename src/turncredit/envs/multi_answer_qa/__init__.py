"""Multi-answer QA with a search tool (the SPADER system's environment)."""

from turncredit.envs.multi_answer_qa.data import Question, load_questions
from turncredit.envs.multi_answer_qa.env import (
    MultiAnswerQAEnv, MultiAnswerQAOptions, QARecord, QAState,
)
from turncredit.envs.multi_answer_qa.matching import (
    Entity, ReferenceScore, SetScore, match_entities, normalize, reference_score, set_score,
)
from turncredit.envs.multi_answer_qa.parse import Action, parse_action

__all__ = [
    "Action", "Entity", "MultiAnswerQAEnv", "MultiAnswerQAOptions", "QARecord", "QAState", "Question", "SetScore",
    "load_questions", "match_entities", "normalize", "parse_action", "reference_score", "ReferenceScore", "set_score",
]
