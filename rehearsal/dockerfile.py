"""A Dockerfile read the way the builder reads it: instructions with their flags, line continuations
joined, comments and parser directives dropped, `${VAR}` / `$VAR` expanded from ARG and ENV values.
Enough of the format for the image build rehearsal to run each stage's steps; not a builder."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")
_FLAG = re.compile(r"--([\w-]+)=(\S+)\s+")


class DockerfileError(ValueError):
    """The Dockerfile uses something the rehearsal cannot read (one line, names the file and line)."""


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, ARG, RUN, ...
    arguments: str  # after the keyword and its --flags, continuations joined
    flags: dict[str, str] = field(default_factory=dict)
    line: int = 0

    def words(self, variables: dict[str, str]) -> list[str]:
        """Words split first, then each expanded (COPY, ENV, WORKDIR): as the builder does, a value is
        never split or unquoted again (a JSON build argument stays intact)."""
        return [expand(word, variables) for word in shlex.split(self.arguments)]


@dataclass(frozen=True)
class Stage:
    base: str  # the FROM image reference, unexpanded
    name: str | None
    instructions: tuple[Instruction, ...]


def expand(text: str, variables: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        found = variables.get(name, "")
        return found if found or default is None else default

    return _VARIABLE.sub(value, text)


def parse(text: str, *, source: str = "Dockerfile") -> list[Instruction]:
    instructions, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue  # blank lines, comments and `# syntax=` directives
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as the builder does
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        instructions.append(_instruction(pending + stripped, start, source))
        pending = ""
    if pending:
        raise DockerfileError(f"{source}:{start}: the file ends inside a continued instruction")
    return instructions


def _instruction(text: str, line: int, source: str) -> Instruction:
    keyword, _, rest = text.partition(" ")
    flags: dict[str, str] = {}
    rest = rest.strip() + " "
    while (match := _FLAG.match(rest)) is not None:
        flags[match.group(1)] = match.group(2)
        rest = rest[match.end() :]
    if not keyword.isalpha():
        raise DockerfileError(f"{source}:{line}: cannot read instruction {text[:40]!r}")
    return Instruction(keyword.upper(), rest.strip(), flags, line)


def stages(instructions: list[Instruction]) -> tuple[list[Instruction], list[Stage]]:
    """(the global ARGs before the first FROM, the stages in order)."""
    preamble: list[Instruction] = []
    result: list[Stage] = []
    current: list[Instruction] | None = None
    base = name = None
    for instruction in instructions:
        if instruction.keyword == "FROM":
            if current is not None:
                result.append(Stage(base, name, tuple(current)))
            words = instruction.arguments.split()
            base = words[0]
            name = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            current = []
        elif current is None:
            preamble.append(instruction)
        else:
            current.append(instruction)
    if current is not None:
        result.append(Stage(base, name, tuple(current)))
    return preamble, result


def read(path: Path) -> tuple[list[Instruction], list[Stage]]:
    return stages(parse(path.read_text(), source=str(path)))
