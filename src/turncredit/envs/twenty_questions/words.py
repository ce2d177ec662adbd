"""Secret words: the shipped splits (data/words/*.tsv) and user-supplied lists.

A secret carries the WordNet synset the WordNet oracle answers from: a concrete sense where the
word has one (WordNet's first sense of a word is not always the concrete one), else its first
noun sense, so lists with abstract nouns (the ΔBelief-RL paper's COCA+: "freedom", "idea") load
too. With a judge that needs no WordNet (an LLM), a word WordNet lacks loads without a synset.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turncredit.paths import repo_root

#: lexicographer files that make a noun sense "concrete enough" for the game
CONCRETE_LEXNAMES = (
    "noun.animal", "noun.artifact", "noun.food", "noun.plant",
    "noun.object", "noun.body", "noun.substance",
)
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SecretWord:
    word: str
    synset: str  # e.g. "dog.n.01"
    category: str  # lexname without "noun.", e.g. "animal"


def qualifying_synset(wn: Any, word: str, any_sense: bool = False) -> Any | None:
    """The first noun sense (WordNet order) of `word` in a concrete lexicographer file, or with
    `any_sense` and no concrete one, its first noun sense of any kind.

    Only senses that list `word` itself as a lemma count, so "glasses" is spectacles and never
    falls back to the senses of "glass".
    """
    key = word.strip().lower().replace(" ", "_")
    own = [syn for syn in wn.synsets(key, "n") if key in {name.lower() for name in syn.lemma_names()}]
    concrete = [syn for syn in own if syn.lexname() in CONCRETE_LEXNAMES]
    if concrete:
        return concrete[0]
    return own[0] if any_sense and own else None


def secret_from_synset(word: str, syn: Any) -> SecretWord:
    return SecretWord(word=word, synset=syn.name(), category=syn.lexname().split(".", 1)[1])


def default_words_path(split: str) -> Path:
    """The shipped word list of a split: data/words/<split>.tsv."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return repo_root() / "data" / "words" / f"{split}.tsv"


def load_words(path: str | Path, needs_synset: bool = True) -> list[SecretWord]:
    """Our TSV (header word, synset, category, ...) or a plain file of one word per line.

    A plain word gets its concrete WordNet noun sense, else its first noun sense; one with no
    noun sense at all is an error naming the file, line and word when `needs_synset` (the
    WordNet oracle answers from the synset), else it loads with an empty synset (an LLM judge
    reads only the word).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word list not found: {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if first.split("\t")[0].strip().lower() == "word" and "\t" in first:
        words = _load_tsv(path, lines)
    else:
        words = _load_plain(path, lines, needs_synset)
    if not words:
        raise ValueError(
            f"{path}: no words found (expected a TSV with a 'word' header or one word per line)"
        )
    return words


def _load_tsv(path: Path, lines: list[str]) -> list[SecretWord]:
    reader = csv.DictReader(lines, delimiter="\t")
    cols = reader.fieldnames or []
    missing = [c for c in ("word", "synset") if c not in cols]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing} in header (expected word, synset, category, ...)"
        )
    out = []
    for n, row in enumerate(reader, 2):
        word, synset = (row.get("word") or "").strip(), (row.get("synset") or "").strip()
        if not word and not synset:
            continue
        if not word or not synset:
            raise ValueError(f"{path}:{n}: expected a word and a synset, got {word!r}, {synset!r}")
        category = (row.get("category") or "").strip()
        if not category:
            category = _synset_category(path, n, synset)
        out.append(SecretWord(word=word, synset=synset, category=category))
    return out


def _synset_category(path: Path, n: int, synset: str) -> str:
    from turncredit.envs.twenty_questions.wordnet import load_wordnet

    try:
        syn = load_wordnet().synset(synset)
    except Exception:
        raise ValueError(
            f"{path}:{n}: unknown WordNet synset {synset!r} (expected e.g. dog.n.01)"
        ) from None
    return syn.lexname().split(".", 1)[-1]


def _load_plain(path: Path, lines: list[str], needs_synset: bool) -> list[SecretWord]:
    from turncredit.envs.twenty_questions.wordnet import load_wordnet

    wn = load_wordnet()
    out = []
    for n, line in enumerate(lines, 1):
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        syn = qualifying_synset(wn, word, any_sense=True)
        if syn is not None:
            out.append(secret_from_synset(word, syn))
        elif needs_synset:
            raise ValueError(
                f"{path}:{n}: word {word!r} has no WordNet noun sense, which the WordNet oracle answers "
                "from (fix the spelling, give its synset in a TSV, or use an LLM judge: oracle=llm)"
            )
        else:
            out.append(SecretWord(word=word, synset="", category=""))
    return out
