"""Shared fixtures: the real SmolLM2 tokenizer (cached, no model conversion), a tiny random
policy over it, and the same tokenizer wearing a Qwen3-style chat template."""

from __future__ import annotations

import copy

import pytest

from turncredit import precision
from turncredit.policy import load_tokenizer, tiny_model

# Modelled on Qwen3's template (written here, not copied): ChatML, plus
# * an assistant message's `<think>…</think>` is split off its content; it is shown only for
#   assistant turns after the last user message (the last one always gets a think block,
#   empty if it had none) and stripped from every earlier turn;
# * `add_generation_prompt` with `enable_thinking=False` pre-fills an empty think block.
QWEN3_STYLE_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set content = m.content -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


@pytest.fixture(autouse=True)
def fp32_unless_asked(monkeypatch):
    """`bf16: auto` reads as fp32 in tests, so their numbers do not depend on the CI machine's
    CPU; tests of the probe itself replace this answer (tests/test_precision.py)."""
    monkeypatch.setattr(precision, "_PROBES", {"cpu": precision.Bf16Probe("cpu", False, "pinned to fp32 in tests")})


@pytest.fixture(scope="session")
def smol_tokenizer():
    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def tiny_policy(smol_tokenizer):
    return tiny_model(smol_tokenizer, seed=0)


@pytest.fixture(scope="session")
def qwen3_style_tokenizer(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    return tok
