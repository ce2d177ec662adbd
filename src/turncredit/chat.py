"""Token-in-token-out turn bridging for any chat template.

Why this exists: the most reported bug class in multi-turn RL stacks (verl, SkyRL, prime-rl,
Search-R1) is re-tokenisation drift — rendering the dialogue to text and tokenising it again
gives different tokens from the ones the policy sampled (a word the policy spelled in single
characters comes back as one token; a template strips `<think>` from past turns, as Qwen3's
does). The policy is then trained on a sequence it never produced.

`ChatBridge` never re-tokenises the policy's tokens. The context grows only by appending:

    opening_ids(messages)                         # system + user + generation prompt
    + action_ids                                  # sampled, ending in end_of_turn_id (loss)
    + reply_ids(reply, action_ended)              # template glue + reply + generation prompt
    + action_ids + reply_ids(...) + ...

The template's pieces around a reply are found once, by rendering a fixed dummy conversation
with and without an extra user message and taking the text after the dummy assistant's
end-of-turn token; a reply then costs one tokenisation of `before + reply + after`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

_SENTINEL = "TURNCREDIT_REPLY_SENTINEL_7F3A"  # plain text: trimming/escaping templates keep it intact
# Surrounding whitespace catches templates that trim or otherwise rewrite message content;
# for those we render each reply through the template instead of splicing cached pieces.
_PROBE = " \n Probe reply, 2 lines.\n "
_SYSTEM, _USER, _ASSISTANT = "s", "u", "a"


class ChatBridge:
    """Builds the token sequence of a multi-turn dialogue by appending, never re-rendering.

    `chat_template_kwargs` go to every `apply_chat_template` call (e.g.
    `{"enable_thinking": False}` for Qwen3). After construction, `history_stable` says whether
    the template renders past turns the same way once the dialogue grows; when it is False
    (Qwen3 strips `<think>` from past assistant turns), re-tokenising the history would drift,
    and only this bridge's appended sequence matches what the policy generated.
    """

    def __init__(self, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("ChatBridge: the tokenizer has no chat_template (set tokenizer.chat_template)")
        self.tokenizer = tokenizer
        self.template_kwargs: dict[str, Any] = dict(chat_template_kwargs or {})
        self._adds_bos = self._tokenizer_adds_bos()
        self._base = self._dummy_conversation()
        self._short = self._render(self._base, generation_prompt=False)
        self.end_of_turn_id, self._eot_text = self._detect_end_of_turn()
        self._anchor = _ASSISTANT + self._eot_text
        self._opening_plain = self._render(self._base[:-1], generation_prompt=False)
        self.history_stable = True
        self._pieces: dict[str, tuple[str, str] | None] = {}
        self._heads: dict[str, str] = {}
        self._reply_pieces("user")  # validate the template now, not at the first reply

    # -- public API ---------------------------------------------------------------------

    def opening_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Tokens of the opening messages rendered with the generation prompt (turn 0's prompt).

        Tokenised without adding special tokens (the template writes its own); a BOS is added
        only if the tokenizer normally adds one and the template did not, so it is never doubled.
        """
        msgs = _check_messages(messages, "opening messages")
        if msgs[-1]["role"] == "assistant":
            raise ValueError("opening messages: the last message must not be 'assistant' "
                             "(the policy writes the assistant turn)")
        ids = self._encode(self._render(msgs, generation_prompt=True))
        bos = self.tokenizer.bos_token_id
        if self._adds_bos and bos is not None and ids[:1] != [bos]:
            ids = [bos] + ids
        return ids

    def reply_ids(self, reply: str, action_ended: bool = True, role: str = "user") -> list[int]:
        """Tokens appended after the policy's action for the environment's `reply`.

        If the action was cut off before its end-of-turn token (`action_ended=False`), the
        end-of-turn token comes first (as prompt, without loss). Then whatever the template puts
        after an end-of-turn, the reply rendered as a `role` message, and the generation prompt.
        """
        if not isinstance(reply, str):
            raise TypeError(f"reply_ids: reply must be a str, got {type(reply).__name__}")
        pieces = self._reply_pieces(role)
        text = pieces[0] + reply + pieces[1] if pieces is not None else self._suffix(role, reply)
        ids = self._encode(text)
        return ids if action_ended else [self.end_of_turn_id] + ids

    def dialogue_ids(self, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[int]]:
        """Token ids and loss mask of a whole chat, laid out exactly as a rollout lays it out.

        For SFT: leading non-assistant messages → `opening_ids`; each assistant message → its
        content tokenised on its own plus the end-of-turn token (mask 1, or 0 where the message
        has `"weight": 0`, as in OpenAI's fine-tuning format: context, not a target); each
        message after it → `reply_ids` (mask 0). Assistant and other messages must alternate
        after the opening.
        """
        msgs = _check_messages(messages, "dialogue")
        start = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), None)
        if start is None:
            raise ValueError("dialogue: expected at least one 'assistant' message")
        if start == 0:
            raise ValueError("dialogue messages[0]: expected a system or user message before the first assistant turn")
        ids = self.opening_ids(msgs[:start])
        mask = [0] * len(ids)
        for i in range(start, len(msgs)):
            m = msgs[i]
            want_assistant = (i - start) % 2 == 0
            if want_assistant != (m["role"] == "assistant"):
                expected = "'assistant'" if want_assistant else "a non-assistant message"
                raise ValueError(f"dialogue messages[{i}]: expected {expected} (turns must alternate), got {m['role']!r}")
            if want_assistant:
                piece = self.action_ids(m["content"])
                mask += [message_weight(m, f"dialogue messages[{i}]")] * len(piece)
            else:
                piece = self.reply_ids(m["content"], action_ended=True, role=m["role"])
                mask += [0] * len(piece)
            ids += piece
        return ids, mask

    def action_ids(self, text: str) -> list[int]:
        """An assistant message written by someone else (an expert) as the policy's action
        tokens: the text tokenised on its own, then the end-of-turn token."""
        return self._encode(text) + [self.end_of_turn_id]

    def decode_action(self, ids: Sequence[int]) -> str:
        """The action's text, without the end-of-turn token (and anything after it)."""
        ids = list(ids)
        if self.end_of_turn_id in ids:
            ids = ids[: ids.index(self.end_of_turn_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    # -- template analysis --------------------------------------------------------------

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt, **self.template_kwargs)
        except Exception as e:  # jinja raises its own types; say which render failed
            roles = ", ".join(m["role"] for m in messages)
            raise ValueError(f"chat template failed to render [{roles}]: {e}") from None
        if not isinstance(text, str):
            raise ValueError(f"chat template: expected rendered text, got {type(text).__name__}")
        return text

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _tokenizer_adds_bos(self) -> bool:
        bos = self.tokenizer.bos_token_id
        if bos is None:
            return False
        with_special = self.tokenizer.encode("x", add_special_tokens=True)
        return with_special[:1] == [bos] and self._encode("x")[:1] != [bos]

    def _dummy_conversation(self) -> list[dict[str, str]]:
        """[system, user, assistant], or [user, assistant] for templates that reject a system role."""
        conv = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER},
                {"role": "assistant", "content": _ASSISTANT}]
        try:
            self._render(conv, generation_prompt=False)
            return conv
        except ValueError:
            return conv[1:]

    def _detect_end_of_turn(self) -> tuple[int, str]:
        """The special token the template writes right after an assistant message's content."""
        specials = {t: i for t, i in self.tokenizer.get_added_vocab().items() if t}
        text = self._short
        pos = len(text)
        while (pos := text.rfind(_ASSISTANT, 0, pos)) >= 0:
            rest = text[pos + len(_ASSISTANT):]
            hits = [t for t in specials if rest.startswith(t)]
            if hits:
                eot = max(hits, key=len)
                if self._encode(eot) != [specials[eot]]:
                    raise ValueError(f"chat template: end-of-turn {eot!r} does not tokenise to its own single id")
                return specials[eot], eot
        raise ValueError(
            "chat template: could not detect the end-of-turn token — no special token follows the "
            f"assistant content in the rendered dummy conversation {text!r}")

    def _history_head(self, longer: str, role: str) -> str:
        """The text of `longer` up to and including the dummy assistant's end-of-turn token."""
        if longer.startswith(self._short):
            return longer[: self._short.rfind(self._anchor) + len(self._anchor)]
        # The template re-renders the earlier assistant turn once the dialogue grows (e.g.
        # Qwen3 drops the empty <think></think> of the final turn, and strips real ones from
        # past turns). Bridging still works as long as that turn's content and end-of-turn
        # survive: we take what follows them, and never re-render the history ourselves.
        self.history_stable = False
        if not longer.startswith(self._opening_plain):
            raise ValueError(
                f"chat template: adding a {role!r} message changes how the opening messages render "
                "(the shorter rendering is not a prefix of the longer one); turns cannot be appended")
        found = longer.rfind(self._anchor, len(self._opening_plain), longer.find(_SENTINEL))
        if found < 0:
            raise ValueError(
                f"chat template: adding a {role!r} message rewrites the earlier assistant turn "
                f"(its content followed by {self._eot_text!r} no longer appears, so the shorter rendering "
                "is not a prefix of the longer one); turns cannot be appended")
        return longer[: found + len(self._anchor)]

    def _render_reply(self, role: str, content: str) -> str:
        return self._render(self._base + [{"role": role, "content": content}], generation_prompt=True)

    def _suffix(self, role: str, content: str) -> str:
        """Text after the dummy assistant's end-of-turn when a `role` message with `content`
        follows, generation prompt included (the slow path, for content-rewriting templates)."""
        longer = self._render_reply(role, content)
        head = self._heads[role]
        if not longer.startswith(head):
            raise ValueError(f"chat template: a {role!r} message's content changes how the earlier turns render")
        return longer[len(head):]

    def _reply_pieces(self, role: str) -> tuple[str, str] | None:
        """Cached (before, after) text around a reply, or None if the template rewrites content."""
        if role in self._pieces:
            return self._pieces[role]
        longer = self._render_reply(role, _SENTINEL)
        head = self._history_head(longer, role)
        suffix = longer[len(head):]
        if suffix.count(_SENTINEL) != 1:
            raise ValueError(f"chat template: a {role!r} message's content does not appear exactly once "
                             f"in its rendering {suffix!r}")
        self._heads[role] = head
        before, after = suffix.split(_SENTINEL)
        pieces: tuple[str, str] | None = (before, after)
        if self._suffix(role, _PROBE) != before + _PROBE + after:
            pieces = None  # the template transforms content (e.g. trims it): render every reply
        self._pieces[role] = pieces
        return pieces


def message_weight(message: Mapping[str, object], where: str) -> int:
    """An assistant message's `weight`: 1 (a target, the default) or 0 (context only)."""
    w = message.get("weight", 1)
    if w not in (0, 1) or isinstance(w, bool):
        raise ValueError(f"{where}.weight: expected 0 or 1, got {w!r}")
    return int(w)


def _check_messages(messages: Sequence[Mapping[str, str]], where: str) -> list[dict[str, str]]:
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ValueError(f"{where}: expected a non-empty list of {{'role', 'content'}} messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"{where}[{i}]: expected {{'role': str, 'content': str}}, got {m!r}")
        out.append(dict(m))
    return out
