"""Retrievers behind one call: many queries in, the top-k passages of each out.

A retriever answers a whole turn's queries (every active episode's) in one call, so a BM25
index scores them as one sparse product and a server gets one request.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from turncredit.jsonl import iter_jsonl
from turncredit.registry import Registry


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    @classmethod
    def from_contents(cls, pid: str, contents: str) -> "Passage":
        """Search-R1 corpora store `"Title"\\ntext` in one `contents` field."""
        head, _, body = contents.partition("\n")
        if body:
            return cls(pid, head.strip().strip('"'), body.strip())
        return cls(pid, "", contents.strip())


class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


RETRIEVERS: Registry[type] = Registry("retriever")


def read_corpus(path: str | Path) -> list[Passage]:
    """A JSONL corpus: one passage per line, `{"id", "title", "text"}` or `{"id", "contents"}`."""
    out: list[Passage] = []
    for n, (where, row) in enumerate(iter_jsonl(path, "corpus")):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object per line")
        pid = str(row.get("id", row.get("_id", n)))
        if isinstance(row.get("contents"), str):
            out.append(Passage.from_contents(pid, row["contents"]))
        elif isinstance(row.get("text"), str):
            out.append(Passage(pid, str(row.get("title", "")), row["text"]))
        else:
            raise ValueError(f"{where}: expected a 'text' (with optional 'title') or a 'contents' string")
    if not out:
        raise ValueError(f"{Path(path).expanduser()}: the corpus is empty")
    return out
