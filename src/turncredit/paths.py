"""Where the shipped data lives."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    """The repository root (the package is installed editable from src/turncredit)."""
    return Path(__file__).resolve().parents[2]
