"""A client for the `POST /retrieve` protocol of Search-R1 / SPADER retrieval servers.

Request: `{"queries": [...], "topk": k, "return_scores": true}`; reply: `{"result": [[hit, …]
per query]}` where a hit is `{"document": {"id", "contents"}, "score"}` (or, without scores,
the document itself). Retries and failure as in `turncredit.http_json.post_json`: what still
fails aborts the episode rather than feeding it an empty result.
"""

from __future__ import annotations

from typing import Any, Sequence

from turncredit.http_json import post_json
from turncredit.search.base import RETRIEVERS, Passage


@RETRIEVERS.register("http")
class HTTPRetriever:
    def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.5) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"search url: expected http(s)://host:port/retrieve, got {url!r}")
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        body = {"queries": list(queries), "topk": k, "return_scores": True}
        return post_json(self.url, body, lambda payload: _parse(payload, len(queries)), what="retriever",
                         timeout=self.timeout, retries=self.retries, backoff=self.backoff)


def _parse(payload: Any, n: int) -> list[list[Passage]]:
    result = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(result, list) or len(result) != n:
        raise ValueError(f"retriever reply: expected 'result' with one list per query ({n})")
    out = []
    for hits in result:
        if not isinstance(hits, list):
            raise ValueError("retriever reply: each 'result' entry must be a list of hits")
        row = []
        for h in hits:
            doc = h.get("document", h) if isinstance(h, dict) else None
            if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
                raise ValueError("retriever reply: a hit needs document.contents")
            row.append(Passage.from_contents(str(doc.get("id", "")), doc["contents"]))
        out.append(row)
    return out
