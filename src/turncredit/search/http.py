"""A client for the `POST /retrieve` protocol of Search-R1 / SPADER retrieval servers.

Request: `{"queries": [...], "topk": k, "return_scores": true}`; reply: `{"result": [[hit, …]
per query]}` where a hit is `{"document": {"id", "contents"}, "score"}` (or, without scores,
the document itself). Transient failures (connection errors, timeouts, 5xx) are retried with
exponential backoff; what still fails raises `EnvFailure`, so the episode is aborted and
counted rather than fed an empty result.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

from turncredit.envs.base import EnvFailure
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
        body = json.dumps({"queries": list(queries), "topk": k, "return_scores": True}).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    payload = json.loads(resp.read().decode("utf-8"))
                return _parse(payload, len(queries))
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code < 500:
                    break  # the request itself is wrong: retrying will not help
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except ValueError as e:  # not JSON, or not the protocol
                last = str(e)
        raise EnvFailure(f"retriever {self.url} failed after {attempt + 1} attempt(s): {last}")


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
