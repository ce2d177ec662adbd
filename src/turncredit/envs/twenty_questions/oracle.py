"""Oracles answer a questioner's yes/no question about a secret word.

`WordNetOracle` (the CPU default) is deterministic: it parses the category X out of the forms a
small model actually produces ("Is it a musical instrument?", "Are they animals?", "Is it a
kind of tool?") and answers Yes when X names a hypernym of the secret's recorded synset or its
lexicographer category, No when X is some other WordNet noun, Finished when X names the secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Sequence

from turncredit.envs.twenty_questions.mentions import mentions
from turncredit.envs.twenty_questions.wordnet import load_wordnet
from turncredit.envs.twenty_questions.words import SecretWord
from turncredit.registry import Registry

LABELS = ("Yes", "No", "Invalid", "Finished")

HINT = (
    "Ask one yes/no question about its category, in a form like 'Is it an animal?', "
    "'Is it a kind of tool?', 'Is it made by humans?' or 'Is it edible?'; "
    "guess a word with 'Is it a <word>?'."
)


@dataclass
class OracleAnswer:
    label: str  # one of LABELS
    hint: str = ""
    key: str | None = None  # the parsed category (a WordNet lemma key), if any


class Oracle:
    """Interface: answer one question about a secret."""

    #: answers are a cheap, deterministic function of (question, word): the environment may ask
    #: about every listed word to keep the exact posterior (`exact_belief`). Not a person or a judge
    exact: ClassVar[bool] = False
    #: answers come from the secret's WordNet synset: every listed word must have one
    needs_synset: ClassVar[bool] = False

    def answer(self, question: str, secret: SecretWord, history: Sequence[tuple[str, str]] = ()) -> OracleAnswer:
        """`history`: the episode's earlier (question, reply) pairs, for judges that read them."""
        raise NotImplementedError

    def parse(self, question: str) -> str | None:
        """The question's normalised category key, for repeat detection (None if unknown)."""
        return None

    def label_for(self, question: str, word: SecretWord, history: Sequence[tuple[str, str]] = ()) -> str:
        """The label the game gives `question` if `word` were the secret: an exact mention of
        the word finishes the game before the oracle is asked."""
        return "Finished" if mentions(question, word.word) else self.answer(question, word, history).label


ORACLES: Registry[type[Oracle]] = Registry("oracle")

# phrases that are not WordNet nouns (or are ambiguous ones) mapped to a canonical key
PHRASES: dict[str, str] = {
    "alive": "living_thing", "living": "living_thing", "a living thing": "living_thing",
    "living thing": "living_thing", "a live thing": "living_thing",
    "edible": "food", "eatable": "food", "you can eat": "food", "people can eat": "food",
    "people eat": "food", "you eat": "food", "something to eat": "food", "food item": "food",
    "man-made": "artifact", "manmade": "artifact", "man made": "artifact", "human-made": "artifact",
    "artificial": "artifact", "manufactured": "artifact", "made by humans": "artifact",
    "made by people": "artifact", "made by man": "artifact", "man-made object": "artifact",
    "man-made thing": "artifact", "object made by people": "artifact",
    "object made by humans": "artifact", "thing made by people": "artifact",
    "thing made by humans": "artifact", "artefact": "artifact",
    "part of the body": "body_part", "part of the human body": "body_part",
    "body part": "body_part", "human body part": "body_part",
}

# canonical keys that also answer Yes for every secret of these lexicographer categories
CATEGORY_ALIASES: dict[str, frozenset[str]] = {
    "animal": frozenset({"animal"}),
    "plant": frozenset({"plant"}),
    "food": frozenset({"food"}),
    "artifact": frozenset({"artifact"}),
    "body_part": frozenset({"body"}),
    "substance": frozenset({"substance"}),
    "material": frozenset({"substance"}),
    "natural_object": frozenset({"object"}),
    "living_thing": frozenset({"animal", "plant"}),
    "organism": frozenset({"animal", "plant"}),
}

_SUBJECT = (
    r"(?:is it|is this|is that|are they|are these|are those|is the secret(?: word)?"
    r"|is the (?:word|object|thing|answer)|is your (?:word|object|thing))"
)
_ART = r"(?:(?:a|an|the|some|any) )?"
_PATTERNS = [
    # "Is it made by humans?", "Is it man-made?" (whole-phrase aliases)
    re.compile(rf"^{_SUBJECT} (made by (?:humans|people|man))$"),
    # "Is it something you can eat / edible / alive / man-made?"
    re.compile(
        rf"^{_SUBJECT} (?:something|a thing|an object)(?: that)?(?: is)? "
        r"(you can eat|people can eat|people eat|you eat|edible|alive|living|man-made|manmade"
        r"|man made|made by (?:humans|people|man))$"
    ),
    # "Is it a kind of tool?", "Is it some type of animal?"
    re.compile(rf"^{_SUBJECT} {_ART}(?:kind|type|sort|form|variety) of {_ART}(.+)$"),
    # "Is it (a|an|the|some) X?"
    re.compile(rf"^{_SUBJECT} {_ART}(.+)$"),
]


def normalise_question(question: str) -> str:
    """Lowercase, punctuation dropped, whitespace collapsed: two spellings of one question match."""
    q = question.lower().replace("’", "'")
    q = re.sub(r"[^a-z0-9' -]+", " ", q)
    return " ".join(q.split())


def _lemma_key(name: str) -> str:
    return name.lower()


@lru_cache(maxsize=None)
def _closure_keys(synset_name: str) -> frozenset[str]:
    """Lemma keys of every hypernym (and instance hypernym) of a synset, transitively."""
    syn = load_wordnet().synset(synset_name)
    keys = set()
    for s in syn.closure(lambda s: s.hypernyms() + s.instance_hypernyms()):
        keys.update(_lemma_key(n) for n in s.lemma_names())
    return frozenset(keys)


@lru_cache(maxsize=None)
def _own_keys(synset_name: str) -> frozenset[str]:
    return frozenset(_lemma_key(n) for n in load_wordnet().synset(synset_name).lemma_names())


@ORACLES.register("wordnet")
class WordNetOracle(Oracle):
    """Category questions answered from WordNet's hypernym closure of the secret's synset."""

    exact = True
    needs_synset = True

    def __init__(self) -> None:
        self.wn = load_wordnet()

    # -- parsing -----------------------------------------------------------------------------
    def parse(self, question: str) -> str | None:
        phrase = self.category_phrase(question)
        return None if phrase is None else self.resolve(phrase)

    def category_phrase(self, question: str) -> str | None:
        """The X of an accepted question form, lowercased, or None if no form matches."""
        q = normalise_question(question.strip().rstrip("?"))
        for pat in _PATTERNS:
            m = pat.match(q)
            if m:
                x = m.group(1).strip(" '-")
                return None if x in ("", "a", "an", "the", "some", "any") else x
        return None

    def resolve(self, phrase: str) -> str | None:
        """Map X to a canonical key: an alias, or a WordNet noun lemma (plural → singular)."""
        x = re.sub(r"^(?:a|an|the|some|any) ", "", phrase.strip().lower())
        x = re.sub(r"^(?:a )?pair of ", "", x)  # "a pair of glasses"
        if x in PHRASES:
            return PHRASES[x]
        if not x or len(x) > 80:
            return None
        joined = x.replace(" ", "_")
        forms = [joined]
        if "-" in joined:
            forms.append(joined.replace("-", "_"))
        words = joined.split("_")
        if len(words) > 1:  # "pieces of furniture": singularise each word
            forms.append("_".join(self.wn.morphy(w, "n") or w for w in words))
        for form in forms:
            base = self.wn.morphy(form, "n")
            if base:
                return PHRASES.get(base.replace("_", " "), base)
        return None

    # -- answering ---------------------------------------------------------------------------
    def is_noun(self, key: str) -> bool:
        return key in CATEGORY_ALIASES or bool(self.wn.synsets(key, "n"))

    def yes_keys(self, secret: SecretWord) -> frozenset[str]:
        """Every key answered Yes for this secret (a set lookup per question)."""
        return _yes_keys(secret.synset, secret.category)

    def names_secret(self, key: str, secret: SecretWord) -> bool:
        word = secret.word.strip().lower().replace(" ", "_")
        return key == word or key in _own_keys(secret.synset)

    def answer(self, question: str, secret: SecretWord, history: Sequence[tuple[str, str]] = ()) -> OracleAnswer:
        phrase = self.category_phrase(question)
        key = None if phrase is None else self.resolve(phrase)
        if phrase is not None and key is None:
            raw = phrase.replace(" ", "_")
            if self.names_secret(raw, secret):  # a secret WordNet does not know as a noun
                return OracleAnswer("Finished", key=raw)
        if key is None:
            return OracleAnswer("Invalid", hint=HINT)
        if self.names_secret(key, secret):
            return OracleAnswer("Finished", key=key)
        if key in self.yes_keys(secret):
            return OracleAnswer("Yes", key=key)
        if self.is_noun(key):
            return OracleAnswer("No", key=key)
        return OracleAnswer("Invalid", hint=HINT, key=None)


@lru_cache(maxsize=None)
def _yes_keys(synset_name: str, category: str) -> frozenset[str]:
    aliases = {k for k, cats in CATEGORY_ALIASES.items() if category in cats}
    return _closure_keys(synset_name) | aliases
