"""The history of an environment's pins: every time `promote --apply` or `rollback --apply` writes a pin file,
one line is appended to `history/<env>.jsonl` beside it (model_configs/releases/history/staging.jsonl for
releases/staging.json). A line is one JSON object (sorted keys): the pin as written, when (UTC), who (git's
user.email, else $USER), the repository commit the tool ran at (or null), and the action (promote from an
environment, or rollback to an earlier entry). Entry N is line N (1-based), so a history index never changes:
the file is only ever appended to, and each append rewrites it whole (atomic_write), never half.

`read` validates every line and raises HistoryError, one line naming the file, line and key."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, Field, ValidationError, model_validator

from inferstack import atomic_write
from inferstack.config.problems import Problem
from inferstack.config.release_pin import ReleasePin
from inferstack.schema.base import Frozen, Name

HISTORY_FORMAT = "inferstack-pin-history/1"
HISTORY_DIR = "history"
# One entry is about 300 bytes per image unit: 16 MiB is thousands of promotions of a large fleet.
MAX_HISTORY_BYTES = 16 * 1024 * 1024
GIT_TIMEOUT_S = 10
COMMIT_PATTERN = r"^[0-9a-f]{7,64}$"


class HistoryError(Exception):
    """The history file cannot be read or holds a line that is not a valid entry: str() is one line."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("must be printable text on one line")
    return value


class HistoryEntry(Frozen):
    format: Literal["inferstack-pin-history/1"]
    environment: Name
    action: Literal["promote", "rollback"]
    promoted_from: Name | None = Field(None, description="promote: the source environment")
    rolled_back_to: int | None = Field(None, ge=1, description="rollback: the entry whose pin was restored")
    at: AwareDatetime = Field(description="when the pin was written (UTC)")
    by: Annotated[str, AfterValidator(_printable)] = Field(
        min_length=1, max_length=200, description="git user.email, else $USER"
    )
    repository_commit: str | None = Field(
        None, pattern=COMMIT_PATTERN, description="git rev-parse HEAD where the tool ran, if in a repository"
    )
    pin: ReleasePin

    @model_validator(mode="after")
    def _action_fields(self) -> HistoryEntry:
        if self.action == "promote" and (self.promoted_from is None or self.rolled_back_to is not None):
            raise ValueError("a promote entry names promoted_from (and no rolled_back_to)")
        if self.action == "rollback" and (self.rolled_back_to is None or self.promoted_from is not None):
            raise ValueError("a rollback entry names rolled_back_to (and no promoted_from)")
        if self.pin.environment != self.environment:
            raise ValueError(
                f"pin.environment is {self.pin.environment!r}, the entry's environment {self.environment!r}"
            )
        return self

    def describe_action(self) -> str:
        if self.action == "promote":
            return f"promote from {self.promoted_from}"
        return f"rollback to entry {self.rolled_back_to}"


def history_path(pin_path: Path, env_name: str) -> Path:
    """Where the history of the pin at `pin_path` lives: history/<env>.jsonl in the pin's directory."""
    return pin_path.parent / HISTORY_DIR / f"{env_name}.jsonl"


def same_images(a: ReleasePin, b: ReleasePin) -> bool:
    """Whether two pins deploy the same images (repository and digest per image unit; tags and provenance
    aside)."""
    return {u: (i.repository_uri, i.digest) for u, i in a.images.items()} == {
        u: (i.repository_uri, i.digest) for u, i in b.images.items()
    }


def _fail(path: Path, line: int | None, key: str, message: str) -> HistoryError:
    return HistoryError(Problem(str(path), line, key[:200], message))


def read(path: Path, env_name: str) -> list[HistoryEntry]:
    """Every entry of the history at `path`, oldest first ([] when the file does not exist yet)."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_HISTORY_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _fail(path, None, "", f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_HISTORY_BYTES:
        raise _fail(path, None, "", f"file is larger than {MAX_HISTORY_BYTES} bytes (the limit for a pin history)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = raw[: exc.start].count(b"\n") + 1
        raise _fail(path, line_number, "", "not UTF-8 text") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last entry
    entries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise _fail(path, number, "", "empty line (each line is one entry: a JSON object)")
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(path, number, "", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, arrays nested thousands deep
            raise _fail(path, number, "", f"not valid JSON: {' '.join(str(exc).split())[:200]}") from None
        if not isinstance(data, dict):
            raise _fail(path, number, "", "expected a JSON object")
        if data.get("format") != HISTORY_FORMAT:
            raise _fail(path, number, "format", f"not a pin history entry (format is not {HISTORY_FORMAT!r})")
        try:
            entry = HistoryEntry.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            first = errors[0]
            key = ".".join(str(part) for part in first["loc"] if part != "[key]")
            message = {"missing": "required field is missing", "extra_forbidden": "unknown key"}.get(
                first["type"], first["msg"]
            )
            more = f" (and {len(errors) - 1} more problem(s) on this line)" if len(errors) > 1 else ""
            raise _fail(path, number, key, message + more) from None
        if entry.environment != env_name:
            raise _fail(
                path,
                number,
                "environment",
                f"entry is for {entry.environment!r}, but this is the history of {env_name}",
            )
        if entry.rolled_back_to is not None and entry.rolled_back_to >= number:
            raise _fail(path, number, "rolled_back_to", f"entry {entry.rolled_back_to} is not an earlier entry")
        entries.append(entry)
    return entries


def dump_entry(entry: HistoryEntry) -> str:
    """One line: sorted keys, no whitespace between tokens, ending in a newline."""
    return json.dumps(entry.model_dump(mode="json", exclude_none=True), sort_keys=True, separators=(",", ":")) + "\n"


def append(path: Path, entry: HistoryEntry) -> int:
    """Add `entry` after the existing ones (which must read cleanly) and return its number. The whole file is
    rewritten through a temporary sibling: a failure leaves the previous history, never a partial line."""
    number = len(read(path, entry.environment)) + 1
    try:
        existing = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        existing = ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write.write_text(path, existing + dump_entry(entry))
    except OSError as exc:
        raise _fail(path, None, "", f"cannot write: {exc.strerror or exc}") from None
    return number


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = result.stdout.strip()
    return value if result.returncode == 0 and value else None


def who(cwd: Path) -> str:
    """git config user.email where the tool runs, else $USER (or the login name), else "unknown"."""
    email = _git(["config", "user.email"], cwd)
    if email and email.isprintable() and len(email) <= 200:
        return email
    try:
        user = os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):
        user = ""
    return user if user and user.isprintable() and len(user) <= 200 else "unknown"


def repository_commit(cwd: Path) -> str | None:
    commit = _git(["rev-parse", "HEAD"], cwd)
    return commit if commit and len(commit) in (40, 64) and all(c in "0123456789abcdef" for c in commit) else None


def new_entry(
    pin: ReleasePin,
    *,
    cwd: Path,
    promoted_from: str | None = None,
    rolled_back_to: int | None = None,
    now: datetime | None = None,
) -> HistoryEntry:
    """The entry recording that `pin` was just written, by whoever runs the tool in `cwd`."""
    at = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    return HistoryEntry(
        format=HISTORY_FORMAT,
        environment=pin.environment,
        action="rollback" if rolled_back_to is not None else "promote",
        promoted_from=promoted_from,
        rolled_back_to=rolled_back_to,
        at=at,
        by=who(cwd),
        repository_commit=repository_commit(cwd),
        pin=pin,
    )
