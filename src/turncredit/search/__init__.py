"""Search tools for agents: a local BM25 index and a `/retrieve` server client."""

from turncredit.search import bm25 as _bm25  # noqa: F401  (registers "bm25")
from turncredit.search import http as _http  # noqa: F401  (registers "http")
from turncredit.search.base import RETRIEVERS, Passage, Retriever, read_corpus

__all__ = ["RETRIEVERS", "Passage", "Retriever", "read_corpus"]
