"""A gold-aware searcher that writes demonstrations in the agent's exact format (for SFT).

It knows the answers but answers only with what its searches showed: first the question
itself, then targeted queries for gold entities not yet seen ("<entity> <keywords>"), then an
answer listing the gold entities found in the tool replies. So a demonstration teaches the
format and a search habit, never an answer without evidence.
"""

from __future__ import annotations

import json
import random
import re

from turncredit.envs.base import Task
from turncredit.episode import Episode, Turn

_STOP = {"which", "what", "who", "in", "is", "are", "the", "a", "an", "of", "as", "their", "and",
         "do", "does", "countries", "country", "chemical", "elements", "element", "territories"}


def keywords(question: str, n: int = 4) -> str:
    words = [w for w in re.findall(r"[A-Za-z0-9'-]+", question) if w.lower() not in _STOP]
    return " ".join(words[:n])


class GoldSearcher:
    def __init__(self, search_turns: int = 3) -> None:
        self.search_turns = search_turns

    def play(self, env, task: Task, rng: random.Random, group_id: str = "") -> Episode:
        messages, state = env.reset(task, rng)
        gold = [e.name for e in state.question.answers]
        key = keywords(state.question.question)
        cap = env.options.max_queries or None  # 0: no cap
        budget = min(self.search_turns, env.max_turns - 1)
        turns: list[Turn] = []
        queries = [state.question.question.rstrip("?")]
        for _ in range(budget):
            text = ("<think>I should search for this.</think>" if not turns else
                    f"<think>Still missing some; searching for {len(queries)} more.</think>")
            text += "<tool_call>" + json.dumps(queries[:cap]) + "</tool_call>"
            res = env.step(state, text)
            turns.append(res.to_turn(text))
            missing = [g for g in gold if g not in state.seen_gold]
            queries = [f"{g} {key}".strip() for g in missing][:cap]
            if not queries or res.done:
                break
        if not state.done:
            found = [g for g in gold if g in state.seen_gold]
            text = f"<think>I found {len(found)}.</think><answer>" + json.dumps(found) + "</answer>"
            res = env.step(state, text)
            turns.append(res.to_turn(text))
        return Episode(task=task, group_id=group_id or task.task_id, messages=messages, turns=turns,
                       outcome=1.0 if res.success else 0.0, success=res.success)
