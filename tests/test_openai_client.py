"""The OpenAI-compatible chat client against a real server on loopback."""

from __future__ import annotations

import threading
import time

import pytest
from loopback import JSONHandler, serve

from turncredit.envs.base import EnvFailure
from turncredit.llm import OpenAIChatClient


class ChatHandler(JSONHandler):
    script: list[str] = []  # per request, in order: ok / slow / 500 / 429 / 400 / garbage / nochoices / drop
    seen: list[tuple[str, dict, str]] = []  # (path, body, authorization)
    lock = threading.Lock()
    in_flight = 0
    max_in_flight = 0
    hold = 0.0  # seconds each "ok" reply takes (to see concurrency)

    def do_POST(self):
        body = self.read_json()
        cls = ChatHandler
        with cls.lock:
            cls.seen.append((self.path, body, self.headers.get("Authorization", "")))
            mode = cls.script.pop(0) if cls.script else "ok"
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            if mode not in ("drop", "500", "429", "400"):
                time.sleep(1.0 if mode == "slow" else ChatHandler.hold)
        finally:
            # out of flight before the reply goes out: once a client has its reply it may send
            # the next request at once, which must not be counted beside this one
            with cls.lock:
                cls.in_flight -= 1
        self._reply(mode, body)

    def _reply(self, mode, body):
        if mode == "drop":
            self.connection.close()
            return
        if mode in ("500", "429", "400"):
            self.send_json({}, status=int(mode))
            return
        if mode == "garbage":
            self.send_json(b"Internal gateway says hi")
        elif mode == "nochoices":
            self.send_json({"choices": []})
        else:
            last = body["messages"][-1]["content"]
            self.send_json({"choices": [{"message": {"role": "assistant", "content": f"echo: {last}"}}]})


@pytest.fixture
def base_url():
    ChatHandler.script, ChatHandler.seen = [], []
    ChatHandler.in_flight = ChatHandler.max_in_flight = 0
    ChatHandler.hold = 0.0
    with serve(ChatHandler) as base:
        yield base + "/v1"


def msgs(text):
    return [{"role": "system", "content": "Answer Yes or No."}, {"role": "user", "content": text}]


def test_speaks_chat_completions_with_key_from_the_environment(base_url, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    c = OpenAIChatClient("qwen3-14b", base_url, api_key_env="JUDGE_KEY", max_tokens=4)
    assert c.complete(msgs("Is it alive?")) == "echo: Is it alive?"
    path, body, auth = ChatHandler.seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body == {"model": "qwen3-14b", "messages": msgs("Is it alive?"), "temperature": 0.0, "max_tokens": 4}


def test_base_url_from_the_environment_and_a_clear_error_without_one(base_url, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    assert OpenAIChatClient("m").complete(msgs("x")) == "echo: x"
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValueError, match="base_url"):
        OpenAIChatClient("m")


def test_retries_slow_500_429_garbage_empty_and_dropped_replies(base_url):
    ChatHandler.script = ["slow", "500", "429", "garbage", "nochoices", "drop"]
    c = OpenAIChatClient("m", base_url, timeout=0.3, retries=6, backoff=0.01)
    assert c.complete(msgs("q")) == "echo: q"
    assert len(ChatHandler.seen) == 7


def test_gives_up_with_an_env_failure_and_does_not_retry_a_bad_request(base_url):
    ChatHandler.script = ["500"] * 3
    with pytest.raises(EnvFailure, match="failed after 3 attempt.*HTTP 500"):
        OpenAIChatClient("m", base_url, retries=2, backoff=0.01).complete(msgs("q"))
    ChatHandler.script, ChatHandler.seen = ["400"], []
    with pytest.raises(EnvFailure, match="after 1 attempt.*HTTP 400"):
        OpenAIChatClient("m", base_url, retries=5, backoff=0.01).complete(msgs("q"))
    assert len(ChatHandler.seen) == 1


def test_complete_many_keeps_order_bounds_concurrency_and_isolates_failures(base_url):
    ChatHandler.hold = 0.4  # long enough for 3 requests to overlap on a loaded 2-core machine
    ChatHandler.script = ["400"]  # the first request to arrive fails for good
    c = OpenAIChatClient("m", base_url, retries=0, max_concurrency=3)
    out = c.complete_many([msgs(f"q{i}") for i in range(9)])
    failed = [i for i, r in enumerate(out) if isinstance(r, EnvFailure)]
    assert len(failed) == 1
    assert all(r == f"echo: q{i}" for i, r in enumerate(out) if i not in failed)
    assert ChatHandler.max_in_flight == 3  # overlapped, but never more than the bound
