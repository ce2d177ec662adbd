"""POST a JSON body and read a JSON reply, retrying what a retry can fix.

Shared by the clients that talk to servers in the middle of a rollout (the `/retrieve` search
tool, OpenAI-compatible judges). Retried with exponential backoff: connection errors, timeouts,
408/409/425/429 and 5xx, and a reply `parse` rejects with ValueError (not JSON, not the
protocol). Other HTTP errors stop at once. When it gives up it raises `EnvFailure`, so the
episode that needed the answer is aborted and counted.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from typing import Any, Callable, ContextManager, TypeVar

from turncredit.errors import EnvFailure

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


def post_json(
    url: str, body: Any, parse: Callable[[Any], T], *, what: str, headers: dict[str, str] | None = None,
    timeout: float = 30.0, retries: int = 3, backoff: float = 0.5, gate: ContextManager | None = None,
) -> T:
    """`parse(reply JSON)` of the first attempt that succeeds; `gate` wraps each request (a
    semaphore bounding requests in flight)."""
    data = json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            with gate or contextlib.nullcontext():
                req = urllib.request.Request(url, data=data, headers=hdrs)
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    return parse(json.loads(resp.read().decode("utf-8")))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
            if e.code not in RETRYABLE_STATUS:
                break  # the request itself is wrong: retrying will not help
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        except ValueError as e:  # not JSON, or not the protocol
            last = str(e)
    raise EnvFailure(f"{what} {url} failed after {attempt + 1} attempt(s): {last}")
