"""What every command of `python -m inferstack` shares, below every layer that defines one: how it fails, and the
config directory it reads by default. A command raises UsageError (a bad argument or input: exit 2) or Failure
(it ran, and what it checks or does failed: exit 1), or a subclass; cli.main prints either as one line."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG_DIR = Path("model_configs")
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad argument or input found after parsing; printed as one line, exit 2."""


class Failure(Exception):
    """The command ran but what it checks or does failed; printed as one line, exit 1."""
