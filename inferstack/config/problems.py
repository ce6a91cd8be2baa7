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
        # Keep every problem on one line, whatever the file name, the key (a YAML key may hold "\r" or
        # "\u2028") or the underlying message contained.
        file = _printable(self.file)
        where = file if self.line is None else f"{file}:{self.line}"
        message = " ".join(self.message.split())
        return f"{where}: {_printable(self.key)}: {message}" if self.key else f"{where}: {message}"


def _printable(text: str) -> str:
    """`text` with control and line-breaking characters written as escapes (\\r, \\x1b, \\u2028)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ConfigError(Exception):
    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(sorted(problems, key=lambda p: (p.file, p.line or 0, p.key, p.message)))
        super().__init__("\n".join(str(p) for p in self.problems))
