"""The errors every layer may raise or catch, on the ground floor so that none imports upward
to name one (a tool client raising `EnvFailure` need not import the environments)."""

from __future__ import annotations


class EnvFailure(RuntimeError):
    """An oracle or tool failed after its retries: the episode is aborted, the run goes on."""


class ConfigError(ValueError):
    """A config value is unknown, mistyped or out of range; the message names the key path."""


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete or does not match the model being resumed."""
