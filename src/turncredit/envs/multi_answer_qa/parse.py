"""The agent's action format (SPADER's): optional thinking, then one search call or one answer.

    <think>…</think><tool_call>["query 1", "query 2"]</tool_call>
    <think>…</think><answer>["Entity A", "Entity B"]</answer>

Anything else is a format error with a reason the agent is shown; nothing here raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_TAGS = {"search": re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL),
         "answer": re.compile(r"<answer>(.*?)</answer>", re.DOTALL)}


@dataclass
class Action:
    kind: str  # "search", "answer" or "invalid"
    items: list[str] = field(default_factory=list)  # the queries or the answers
    error: str = ""  # why the action is invalid


def _string_list(body: str, what: str) -> tuple[list[str], str]:
    try:
        value = json.loads(body.strip())
    except json.JSONDecodeError:
        return [], f"the {what} must be a JSON list of strings, e.g. [\"a\", \"b\"]"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return [], f"the {what} must be a JSON list of strings, e.g. [\"a\", \"b\"]"
    items = [v.strip() for v in value if v.strip()]
    return items, ""


def parse_action(text: str, max_queries: int | None = 5) -> Action:
    """Read one action; at most `max_queries` queries per search call (None: no cap)."""
    rest = _THINK.sub("", text, count=1)
    if "<think>" in rest or "</think>" in rest:
        return Action("invalid", error="put at most one <think>…</think> block at the start")
    found = {kind: pat.findall(rest) for kind, pat in _TAGS.items()}
    n_calls, n_answers = len(found["search"]), len(found["answer"])
    if n_calls + n_answers == 0:
        return Action("invalid", error="end your turn with <tool_call>[…]</tool_call> or <answer>[…]</answer>")
    if n_calls + n_answers > 1:
        return Action("invalid", error="use exactly one <tool_call> or one <answer> per turn")
    kind = "search" if n_calls else "answer"
    items, err = _string_list(found[kind][0], "queries" if kind == "search" else "answer")
    if err:
        return Action("invalid", error=err)
    if kind == "search":
        if not items:
            return Action("invalid", error="a <tool_call> needs at least one query")
        if max_queries is not None and len(items) > max_queries:
            return Action("invalid", error=f"at most {max_queries} queries per <tool_call>")
        items = list(dict.fromkeys(items))
    return Action(kind, items)
