"""Prompt text that a config may replace with a file, checked when it is loaded.

A paper's prompts are part of its protocol (a model trained on one questioner prompt plays worse
on another), so every prompt an environment or judge sends may come from a file named in the
config. Placeholders are `str.format` fields (`{reply}`; a literal brace is `{{`). A template
that names a field the caller cannot fill, or leaves out one it needs, is an error at load time
naming the option and the file, not a KeyError in the middle of a rollout.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Iterable

__all__ = ["placeholders", "check_template", "resolve_template"]


def placeholders(text: str) -> set[str]:
    """The field names `text.format(...)` would look up ("{a} {b!r} {{c}}" → {"a", "b"})."""
    names: set[str] = set()
    for _, name, _, _ in string.Formatter().parse(text):
        if name is not None:
            names.add(name)
    return names


def check_template(text: str, field: str, *, allowed: Iterable[str], required: Iterable[str] = (),
                   one_of: Iterable[str] = (), where: str = "") -> str:
    """`text`, after checking its placeholders: each one in `allowed`, every `required` one
    present, and (if given) at least one of `one_of`. `where` names the file in the error."""
    src = f"{field} ({where})" if where else field
    try:
        names = placeholders(text)
    except ValueError as e:  # an unmatched brace
        raise ValueError(f"{src}: not a valid template ({e}); write a literal brace as '{{{{' or '}}}}'") from None
    allowed, required, one_of = set(allowed), set(required), set(one_of)
    if "" in names or any(n.isdigit() for n in names):
        raise ValueError(f"{src}: positional placeholders ('{{}}', '{{0}}') are not supported; "
                         f"use named ones: {_braced(allowed)}")
    unknown = names - allowed
    if unknown:
        raise ValueError(f"{src}: unknown placeholder {_braced(unknown)}; expected some of {_braced(allowed)}")
    missing = required - names
    if missing:
        raise ValueError(f"{src}: missing placeholder {_braced(missing)} (required: {_braced(required)})")
    if one_of and not names & one_of:
        raise ValueError(f"{src}: needs at least one of {_braced(one_of)}")
    return text


def resolve_template(inline: str, path: str | Path, field: str, *, allowed: Iterable[str] | None,
                     required: Iterable[str] = (), one_of: Iterable[str] = ()) -> str:
    """The checked template: the file's text when `path` is set (the `…_file` option), else
    `inline`. A trailing newline of the file is dropped (editors add one; a prompt rarely wants it).
    `allowed=None`: plain text that is never formatted, so its braces are literal and unchecked."""
    if path:
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"{field}_file: prompt file not found: {p}")
        text = p.read_text(encoding="utf-8")
        text = text[:-1] if text.endswith("\n") else text
        if allowed is None:
            return text
        return check_template(text, f"{field}_file", allowed=allowed, required=required, one_of=one_of, where=str(p))
    return inline if allowed is None else check_template(inline, field, allowed=allowed, required=required, one_of=one_of)


def _braced(names: Iterable[str]) -> str:
    return ", ".join("{" + n + "}" for n in sorted(names))
