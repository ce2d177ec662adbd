"""Chat-model clients for judges and tools (the LLM oracle builds on these)."""

from turncredit.llm.openai_client import CHAT_CLIENTS, ChatClient, OpenAIChatClient

__all__ = ["CHAT_CLIENTS", "ChatClient", "OpenAIChatClient"]
