"""A client for any OpenAI-compatible chat-completions server (vLLM, llama.cpp server, a hosted API).

`POST {base_url}/chat/completions` with `{"model", "messages", "temperature", "max_tokens"}`;
the reply text is `choices[0].message.content`. Transient failures (connection errors, timeouts,
429 and 5xx, a reply that is not the protocol) are retried with exponential backoff; what still
fails raises `EnvFailure`, so the episode that needed the answer is aborted and counted, never
given a guessed one. At most `max_concurrency` requests are in flight per client.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, Sequence

from turncredit.envs.base import EnvFailure
from turncredit.registry import Registry

Messages = list[dict[str, str]]


class ChatClient(Protocol):
    def complete(self, messages: Messages) -> str: ...


CHAT_CLIENTS: Registry[type] = Registry("chat client")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


@CHAT_CLIENTS.register("openai")
class OpenAIChatClient:
    """`base_url` / `api_key` fall back to $OPENAI_BASE_URL / $OPENAI_API_KEY (names configurable)."""

    def __init__(
        self, model: str, base_url: str = "", *, api_key: str = "", api_key_env: str = "OPENAI_API_KEY",
        base_url_env: str = "OPENAI_BASE_URL", temperature: float = 0.0, max_tokens: int = 16,
        timeout: float = 60.0, retries: int = 3, backoff: float = 0.5, max_concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        base = (base_url or os.environ.get(base_url_env, "")).rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"chat client base_url: expected http(s)://host:port/v1 (or ${base_url_env}), got {base!r}")
        if max_concurrency < 1 or retries < 0:
            raise ValueError("chat client: max_concurrency must be >= 1 and retries >= 0")
        self.url = base + "/chat/completions"
        self.model = model
        self.api_key = api_key or os.environ.get(api_key_env, "")
        self.body = {"temperature": temperature, "max_tokens": max_tokens, **(extra_body or {})}
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.max_concurrency = max_concurrency
        self._slots = threading.BoundedSemaphore(max_concurrency)

    def complete(self, messages: Messages) -> str:
        payload = json.dumps({"model": self.model, "messages": messages, **self.body}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with self._slots:
                    req = urllib.request.Request(self.url, data=payload, headers=headers)
                    with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                        return _reply_text(json.loads(resp.read().decode("utf-8")))
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code not in RETRYABLE_STATUS:
                    break  # a bad request or key: retrying will not help
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except ValueError as e:  # not JSON, or not the protocol
                last = str(e)
        raise EnvFailure(f"chat server {self.url} failed after {attempt + 1} attempt(s): {last}")

    def complete_many(self, batch: Sequence[Messages]) -> list[str | EnvFailure]:
        """Every conversation answered concurrently (bounded), in order; a failure in its slot."""
        def one(messages: Messages) -> str | EnvFailure:
            try:
                return self.complete(messages)
            except EnvFailure as e:
                return e

        if not batch:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batch))) as pool:
            return list(pool.map(one, batch))


def _reply_text(payload: Any) -> str:
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("chat reply: expected choices[0].message.content") from None
    if not isinstance(content, str):
        raise ValueError("chat reply: message.content is not a string")
    return content
