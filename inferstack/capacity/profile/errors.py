"""What `inferstack profile` reports as a usage error (exit 2) or a failure (exit 1), one line each."""

from __future__ import annotations


class ProfileUsageError(Exception):
    """A bad argument (exit 2)."""


class ProfileFailure(Exception):
    """The measurement cannot be written, or AWS refused (exit 1): one line."""
