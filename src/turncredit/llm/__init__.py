"""Chat-model clients for judges and tools (the LLM oracle builds on these)."""

from turncredit.llm.openai_client import CHAT_CLIENTS, ChatClient, OpenAIChatClient
from turncredit.llm.hf_client import HFChatClient

__all__ = ["CHAT_CLIENTS", "ChatClient", "HFChatClient", "OpenAIChatClient"]
