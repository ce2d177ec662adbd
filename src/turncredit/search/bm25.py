"""A BM25 index (`bm25s`) over a JSONL corpus, built once and cached on disk.

The cache folder is named by a hash of the corpus file's bytes and the index settings, so an
edited corpus gets a new index and an unchanged one is loaded in well under a second.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Sequence

from turncredit.search.base import RETRIEVERS, Passage, read_corpus

INDEX_VERSION = 1


def default_cache_dir() -> Path:
    return Path(os.environ.get("TURNCREDIT_CACHE", "~/.cache/turncredit")).expanduser() / "bm25"


@RETRIEVERS.register("bm25")
class BM25Retriever:
    def __init__(self, corpus: str | Path, *, cache_dir: str | Path | None = None,
                 k1: float = 1.5, b: float = 0.75, stopwords: str = "en") -> None:
        import bm25s

        self.bm25s = bm25s
        self.passages = read_corpus(corpus)
        self.stopwords = stopwords
        digest = hashlib.sha256(Path(corpus).expanduser().read_bytes())
        digest.update(f"v{INDEX_VERSION}:{k1}:{b}:{stopwords}".encode())
        root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.index_dir = root / digest.hexdigest()[:20]
        if (self.index_dir / "done").is_file():
            self.index = bm25s.BM25.load(str(self.index_dir))
        else:
            self.index = bm25s.BM25(k1=k1, b=b)
            self.index.index(self._tokens([_doc_text(p) for p in self.passages]), show_progress=False)
            self._save()

    def _tokens(self, texts: list[str]):
        return self.bm25s.tokenize(texts, stopwords=self.stopwords, show_progress=False)

    def _save(self) -> None:
        tmp = self.index_dir.with_name(self.index_dir.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.index.save(str(tmp))
        (tmp / "done").write_text("ok\n")
        try:
            tmp.rename(self.index_dir)
        except OSError:  # another process finished first; theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        k = min(k, len(self.passages))
        tokens = self.bm25s.tokenize(list(queries), stopwords=self.stopwords, return_ids=False,
                                     show_progress=False)
        vocab = self.index.vocab_dict
        out: list[list[Passage]] = []
        for q in tokens:
            known = [t for t in q if t in vocab]
            if not known:
                out.append([])  # nothing in the query the corpus has ever seen
                continue
            docs, scores = self.index.retrieve([known], k=k, show_progress=False)
            out.append([self.passages[int(d)] for d, s in zip(docs[0], scores[0]) if s > 0])
        return out


def _doc_text(p: Passage) -> str:
    return f"{p.title}\n{p.text}" if p.title else p.text
