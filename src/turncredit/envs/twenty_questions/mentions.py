"""Whether a question names the secret word: the exact-mention rule of 20 Questions.

Below both the environment and the expert questioner, which apply the same rule.
"""

from __future__ import annotations

import re

from turncredit.envs.twenty_questions.wordnet import irregular_plurals


def plural_forms(word: str) -> set[str]:
    """The word and its regular and irregular plurals (lowercase)."""
    w = word.lower()
    forms = {w, w + "s"}
    if re.search(r"(s|x|z|ch|sh|o)$", w):
        forms.add(w + "es")
    if re.search(r"[^aeiou]y$", w):
        forms.add(w[:-1] + "ies")
    if w.endswith("f"):
        forms.add(w[:-1] + "ves")
    if w.endswith("fe"):
        forms.add(w[:-2] + "ves")
    forms |= irregular_plurals().get(w.replace(" ", "_"), frozenset())
    return {f.replace("_", " ") for f in forms}


def mentions(question: str, word: str) -> bool:
    """A whole-word, case-insensitive mention of `word` or its plural."""
    text = " ".join(re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", question.lower()))
    return any(
        re.search(rf"(?<![a-z0-9'-]){re.escape(f)}(?![a-z0-9'-])", text) for f in plural_forms(word)
    )
