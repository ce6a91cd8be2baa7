"""What `inferstack profile` reports as a failure (exit 1), one line; its usage errors are the CLI's own."""

from __future__ import annotations

from inferstack.command_line import Failure


class ProfileFailure(Failure):
    """The measurement cannot be written, or AWS refused (exit 1): one line."""
