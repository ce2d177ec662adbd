"""A client for any OpenAI-compatible chat-completions server (vLLM, llama.cpp server, a hosted API).

`POST {base_url}/chat/completions` with `{"model", "messages", "temperature", "max_tokens"}`;
the reply text is `choices[0].message.content`. Retries and failure as in
`turncredit.http_json.post_json`: what still fails aborts the episode that needed the answer,
never gives it a guessed one. At most `max_concurrency` requests are in flight per client.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, Sequence

from turncredit.errors import EnvFailure
from turncredit.http_json import post_json
from turncredit.registry import Registry

Messages = list[dict[str, str]]


class ChatClient(Protocol):
    def complete(self, messages: Messages) -> str: ...


CHAT_CLIENTS: Registry[type] = Registry("chat client")

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
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return post_json(self.url, {"model": self.model, "messages": messages, **self.body}, _reply_text,
                         what="chat server", headers=headers, timeout=self.timeout, retries=self.retries,
                         backoff=self.backoff, gate=self._slots)

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
