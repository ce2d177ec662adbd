"""Reading JSON Lines files with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def iter_jsonl(path: str | Path, what: str) -> Iterator[tuple[str, Any]]:
    """Yield ("file:line", parsed row) for every non-blank line; `what` names the file in errors."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{what} file not found: {p}")
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{n}: not valid JSON ({e.msg})") from None
            yield f"{p}:{n}", row
