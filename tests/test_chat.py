"""Token-in-token-out bridging: the training sequence is exactly what the policy generated plus
what the environment appended, for every tokenizer/template shipped in tests."""

from __future__ import annotations

import copy

import pytest
import torch

from turncredit.chat import ChatBridge
from turncredit.episode import Episode, Task, Turn

SYSTEM = "You ask yes/no questions to find a secret word."
USER = "Ask your first question."
OPENING = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
THINK_KW = {"enable_thinking": False}


@pytest.fixture(params=["smollm2", "qwen3_style"])
def bridge(request, smol_tokenizer, qwen3_style_tokenizer) -> ChatBridge:
    if request.param == "smollm2":
        return ChatBridge(smol_tokenizer)
    return ChatBridge(qwen3_style_tokenizer, THINK_KW)


def char_tokens(tok, text: str) -> list[int]:
    """A valid but non-canonical tokenisation: one token per character."""
    out: list[int] = []
    for ch in text:
        ids = tok.encode(ch, add_special_tokens=False)
        assert len(ids) == 1, ch
        out += ids
    return out


def rollout(bridge: ChatBridge, actions: list[list[int]], replies: list[str]):
    """A fake policy that emits fixed ids; returns the episode and the context it saw each turn.

    `seen[t]` is the context handed to the "model" at turn t — what a real generate() call
    would condition on — so it is built independently of Episode.token_ids().
    """
    eot = bridge.end_of_turn_id
    context = bridge.opening_ids(OPENING)
    ep = Episode(task=Task("t"), group_id="g", messages=OPENING)
    prompt, seen = list(context), []
    for t, action in enumerate(actions):
        seen.append(list(context))
        context = context + action  # "generation"
        ep.turns.append(Turn(prompt_ids=prompt, action_ids=list(action), sampler_logprobs=[0.0] * len(action),
                             action_text=bridge.decode_action(action), observation=replies[t]))
        ended = bool(action) and action[-1] == eot
        prompt = bridge.reply_ids(replies[t], action_ended=ended)
        if t < len(actions) - 1:
            context = context + prompt
    return ep, seen, context


def three_turn_actions(bridge: ChatBridge, qwen: bool) -> tuple[list[list[int]], list[str]]:
    tok, eot = bridge.tokenizer, bridge.end_of_turn_id
    first = "<think>x</think>Is it an animal?" if qwen else "Is it an animal?"
    return [
        tok.encode(first, add_special_tokens=False) + [eot],  # canonical
        char_tokens(tok, "Is it a cat?") + [eot],  # non-canonical spelling
        tok.encode("Is it a very long", add_special_tokens=False),  # truncated: no end-of-turn
    ], ["No.", "Yes!", "Invalid: not a question."]


def test_end_of_turn_detected(smol_tokenizer, qwen3_style_tokenizer):
    im_end = smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ChatBridge(smol_tokenizer).end_of_turn_id == im_end
    assert ChatBridge(qwen3_style_tokenizer, THINK_KW).end_of_turn_id == im_end


def test_history_stability_flag(smol_tokenizer, qwen3_style_tokenizer):
    assert ChatBridge(smol_tokenizer).history_stable
    assert not ChatBridge(qwen3_style_tokenizer, THINK_KW).history_stable


@pytest.mark.parametrize("qwen", [False, True], ids=["smollm2", "qwen3_style"])
def test_three_turn_rollout_is_exactly_generated_plus_appended(qwen, smol_tokenizer, qwen3_style_tokenizer):
    bridge = ChatBridge(qwen3_style_tokenizer, THINK_KW) if qwen else ChatBridge(smol_tokenizer)
    tok, eot = bridge.tokenizer, bridge.end_of_turn_id
    actions, replies = three_turn_actions(bridge, qwen)
    assert actions[1] != tok.encode("Is it a cat?", add_special_tokens=False)  # really non-canonical
    ep, seen, context = rollout(bridge, actions, replies)

    seq, mask = ep.token_ids(), ep.action_mask()
    assert seq == context and len(mask) == len(seq)
    # Each turn's action sits unchanged right after exactly the context the policy saw.
    for t, action in enumerate(actions):
        start = len(seen[t])
        assert seq[:start] == seen[t]
        assert seq[start:start + len(action)] == action
    # Loss mask: exactly the policy's tokens, its end-of-turn tokens included.
    starts = [len(s) for s in seen]
    expected = {p for s, a in zip(starts, actions) for p in range(s, s + len(a))}
    assert {i for i, m in enumerate(mask) if m} == expected
    assert [seq[s + len(a) - 1] for s, a in zip(starts[:2], actions[:2])] == [eot, eot]
    assert all(mask[s + len(a) - 1] == 1 for s, a in zip(starts[:2], actions[:2]))
    # The truncated turn got its end-of-turn from the bridge, as prompt (no loss).
    assert ep.turns[2].action_ids[-1] != eot
    trailing_prompt = bridge.reply_ids(replies[2], action_ended=False)
    assert trailing_prompt[0] == eot and trailing_prompt[1:] == bridge.reply_ids(replies[2])
    # The opening is the template's own rendering, BOS not duplicated.
    opening = tok.apply_chat_template(OPENING, tokenize=False, add_generation_prompt=True,
                                      **(THINK_KW if qwen else {}))
    assert seq[:starts[0]] == tok.encode(opening, add_special_tokens=False)
    assert seq[:2] != [tok.bos_token_id] * 2
    # Re-tokenising the decoded text would have drifted (so the checks above have teeth).
    assert tok.encode(tok.decode(seq), add_special_tokens=False) != seq
    assert ep.turns[1].action_text == "Is it a cat?"


def test_canonical_smollm2_sequence_equals_template_rendering(smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    tok, eot = smol_tokenizer, bridge.end_of_turn_id
    texts = ["Is it an animal?", "Is it a tool?", "Is it a hammer?"]
    replies = ["No.", "Yes.", "Finished!"]
    ep, _, context = rollout(bridge, [tok.encode(x, add_special_tokens=False) + [eot] for x in texts], replies)
    full = context + bridge.reply_ids(replies[-1])
    conv = list(OPENING)
    for a, r in zip(texts, replies):
        conv += [{"role": "assistant", "content": a}, {"role": "user", "content": r}]
    rendered = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    assert full == tok.encode(rendered, add_special_tokens=False)
    assert tok.decode(full) == rendered
    hf_ids = tok.apply_chat_template(conv, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert full == list(hf_ids)
    assert ep.chat() == conv[:-1]


def test_qwen3_style_rerender_strips_think_but_bridge_keeps_it(qwen3_style_tokenizer):
    bridge = ChatBridge(qwen3_style_tokenizer, THINK_KW)
    tok, eot = qwen3_style_tokenizer, bridge.end_of_turn_id
    first = "<think>x</think>Is it an animal?"
    actions = [tok.encode(first, add_special_tokens=False) + [eot],
               tok.encode("Is it a dog?", add_special_tokens=False) + [eot]]
    ep, seen, context = rollout(bridge, actions, ["Yes.", "Finished!"])
    ours = tok.decode(context)
    assert ours == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n<think>x</think>Is it an animal?<|im_end|>\n"
        "<|im_start|>user\nYes.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nIs it a dog?<|im_end|>")
    assert bridge.decode_action(actions[0]) == first
    # What the policy conditioned on at turn 1 contains its own think block ...
    assert "<think>x</think>" in tok.decode(seen[1])
    # ... but re-rendering the history through the template strips it: re-tokenising drifts.
    rerendered = tok.apply_chat_template(ep.chat(), tokenize=False, **THINK_KW)
    assert "<think>x</think>" not in rerendered and "Is it an animal?" in rerendered
    assert tok.encode(rerendered, add_special_tokens=False)[: len(context)] != context
    # The generation prompt after each reply pre-fills the empty think block, as Qwen3 does.
    assert tok.decode(bridge.reply_ids("Yes.")).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tiny_model_generation_is_trained_on_its_own_tokens(smol_tokenizer, tiny_policy):
    """Real generate() calls: the model's inputs at each turn are prefixes of the training
    sequence, and its sampled tokens are stored without a text round trip."""
    bridge = ChatBridge(smol_tokenizer)
    context = bridge.opening_ids(OPENING)
    ep = Episode(task=Task("t"), group_id="g", messages=OPENING)
    prompt, inputs = list(context), []
    torch.manual_seed(0)
    for _ in range(3):
        inputs.append(list(context))
        with torch.no_grad():
            out = tiny_policy.generate(torch.tensor([context]), max_new_tokens=6, do_sample=True,
                                       eos_token_id=bridge.end_of_turn_id,
                                       pad_token_id=smol_tokenizer.pad_token_id)
        action = out[0, len(context):].tolist()
        assert out[0, : len(context)].tolist() == context
        ep.turns.append(Turn(prompt, action, [0.0] * len(action), bridge.decode_action(action)))
        prompt = bridge.reply_ids("No.", action_ended=action[-1] == bridge.end_of_turn_id)
        context = context + action + prompt
    seq = ep.token_ids()
    for ctx in inputs:
        assert seq[: len(ctx)] == ctx
    assert seq == inputs[-1] + ep.turns[-1].action_ids
    assert sum(ep.action_mask()) == sum(len(t.action_ids) for t in ep.turns)


def test_dialogue_ids_layout_and_mask(bridge):
    tok, eot = bridge.tokenizer, bridge.end_of_turn_id
    a1, a2 = "Is it an animal?", "<think>hm</think>Is it a dog?"
    msgs = OPENING + [{"role": "assistant", "content": a1}, {"role": "user", "content": "Yes."},
                      {"role": "assistant", "content": a2}]
    ids, mask = bridge.dialogue_ids(msgs)
    p1 = tok.encode(a1, add_special_tokens=False) + [eot]
    p2 = tok.encode(a2, add_special_tokens=False) + [eot]
    opening, reply = bridge.opening_ids(OPENING), bridge.reply_ids("Yes.")
    assert ids == opening + p1 + reply + p2  # the same layout a rollout produces
    assert mask == [0] * len(opening) + [1] * len(p1) + [0] * len(reply) + [1] * len(p2)
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == a1 + "<|im_end|>" + a2 + "<|im_end|>"


def test_dialogue_ids_matches_smollm2_template(smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    msgs = OPENING + [{"role": "assistant", "content": "Is it food?"}, {"role": "user", "content": "No."},
                      {"role": "assistant", "content": "Is it a tool?"}]
    ids, _ = bridge.dialogue_ids(msgs)
    rendered = smol_tokenizer.apply_chat_template(msgs, tokenize=False)
    assert rendered.endswith("<|im_end|>\n")
    assert ids == smol_tokenizer.encode(rendered[:-1], add_special_tokens=False)


def test_dialogue_ids_rejects_bad_turn_order(smol_tokenizer):
    bridge = ChatBridge(smol_tokenizer)
    a = {"role": "assistant", "content": "Is it red?"}
    with pytest.raises(ValueError, match=r"messages\[3\]: expected a non-assistant"):
        bridge.dialogue_ids(OPENING + [a, a])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        bridge.dialogue_ids([a])
    with pytest.raises(ValueError, match="at least one 'assistant'"):
        bridge.dialogue_ids(OPENING)
    with pytest.raises(ValueError, match=r"dialogue\[1\]: expected \{'role'"):
        bridge.dialogue_ids([OPENING[0], {"role": "user"}])


def test_decode_action(bridge):
    tok, eot = bridge.tokenizer, bridge.end_of_turn_id
    ids = tok.encode("Is it a cat?", add_special_tokens=False)
    assert bridge.decode_action(ids + [eot]) == "Is it a cat?"
    assert bridge.decode_action(ids) == "Is it a cat?"
    assert bridge.decode_action(char_tokens(tok, "Is it")) == "Is it"


def test_reply_costs_one_tokenisation_and_no_rendering(bridge, monkeypatch):
    calls = []
    real = bridge._encode
    monkeypatch.setattr(bridge, "_encode", lambda text: calls.append(text) or real(text))
    monkeypatch.setattr(bridge, "_render", lambda *a, **k: pytest.fail("reply_ids re-rendered the template"))
    ids = bridge.reply_ids("No, it is not.")
    assert len(calls) == 1 and "No, it is not." in calls[0]
    assert bridge.tokenizer.decode(ids).startswith("\n<|im_start|>user\nNo, it is not.<|im_end|>")


def test_content_rewriting_template_renders_each_reply(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content | trim) + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    bridge = ChatBridge(tok)
    assert bridge._pieces["user"] is None
    assert tok.decode(bridge.reply_ids("  padded  ")) == "\n<|im_start|>user\npadded<|im_end|>\n<|im_start|>assistant\n"


def test_template_errors_are_clear(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(ValueError, match="could not detect the end-of-turn token"):
        ChatBridge(tok)
    # Past assistant turns are replaced wholesale once a user message follows.
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}"
        "{{ '<|im_start|>assistant\\n[earlier answer]<|im_end|>\\n' }}{% else %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    with pytest.raises(ValueError, match="rewrites the earlier assistant turn"):
        ChatBridge(tok)
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat_template"):
        ChatBridge(tok)


def test_opening_must_not_end_with_assistant(smol_tokenizer):
    with pytest.raises(ValueError, match="last message must not be 'assistant'"):
        ChatBridge(smol_tokenizer).opening_ids(OPENING + [{"role": "assistant", "content": "hi"}])
