"""One reportable configuration problem, and the error that carries all of them at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        # Keep every problem on one line, whatever the underlying message contained.
        message = " ".join(self.message.split())
        return f"{where}: {self.key}: {message}" if self.key else f"{where}: {message}"


class ConfigError(Exception):
    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(sorted(problems, key=lambda p: (p.file, p.line or 0, p.key, p.message)))
        super().__init__("\n".join(str(p) for p in self.problems))
