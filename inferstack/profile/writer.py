"""Write throughput_profile entries into a model's YAML file in place: only the lines of the entries written
change (an existing entry is replaced where it stands, a new one appended to the mapping), so the file's
comments, key order, layout and line endings survive byte for byte. The new text is checked twice before it
replaces the file: it parses back to exactly the old data with the new entries, and a copy of the whole config
directory holding it loads (inferstack.config.load); otherwise the old file stays as it was.

A text splice at PyYAML's node marks, not a YAML round-trip library: the CLI runs on the runtime requirements
only, and a round-trip dumper still re-wraps long lines and re-spaces flow mappings elsewhere in the file."""

from __future__ import annotations

import datetime
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import yaml

from inferstack import atomic_write

PROFILE_KEY = "throughput_profile"


class WriteRefused(Exception):
    """The file was left as it was (one line: why)."""


def _scalar(value: object) -> str:
    """One YAML scalar on one line that reads back as `value`."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"no profile field holds {value!r}")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text or "n" in text:  # PyYAML reads 1e-05 as a string; nan/inf never reach a profile
            text = f"{value:.12f}".rstrip("0").rstrip(".")
        return text.removesuffix(".0")
    dumped = yaml.safe_dump({"k": value}, default_flow_style=False, allow_unicode=True, width=1 << 30)
    text = dumped.removeprefix("k: ").removesuffix("\n")
    if "\n" in text:
        shown = value[:60] if isinstance(value, str | list | tuple) else value
        raise WriteRefused(f"{shown!r}: a profile field must fit on one line")
    return text


def render(instance_type: str, entry: Mapping, *, indent: int, step: int, newline: str) -> str:
    lines = [f"{' ' * indent}{_scalar(instance_type)}:"]

    def emit(mapping: Mapping, depth: int) -> None:
        for key, value in mapping.items():
            pad = " " * (indent + depth * step)
            if isinstance(value, Mapping):
                lines.append(f"{pad}{key}:")
                emit(value, depth + 1)
            else:
                lines.append(f"{pad}{key}: {_scalar(value)}")

    emit(entry, 1)
    return newline.join(lines) + newline


def _last_end(node: yaml.Node) -> int:
    """Where the node's own text ends. A block mapping's end mark sits at the next token, past any comment
    lines that follow it: take its last value's end instead."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _last_end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _last_end(node.value[-1])
    return node.end_mark.index


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _line_end(text: str, index: int) -> int:
    """Just past the newline ending the line that `index` is on (or where the text ends)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    end = text.find("\n", index)
    return len(text) if end == -1 else end + 1


def splice(text: str, entries: Mapping[str, Mapping], label: str) -> str:
    """`text` with `entries` (instance type -> entry data) written under throughput_profile. `label` names the
    file in refusals."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise WriteRefused(f"{label}: cannot parse: {' '.join(str(exc).split())}") from None
    profile = None
    if isinstance(root, yaml.MappingNode):
        profile = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == PROFILE_KEY), None)
    if not isinstance(profile, yaml.MappingNode) or not profile.value:
        raise WriteRefused(f"{label}: {PROFILE_KEY}: not a mapping of instance types to write into")
    if profile.flow_style:
        raise WriteRefused(
            f"{label}: {PROFILE_KEY}: written in flow style ({{...}}); write it as a block mapping "
            f"(one instance type per line) so that entries can be replaced in place"
        )
    newline = "\r\n" if "\r\n" in text else "\n"
    indent = profile.value[0][0].start_mark.column
    step = next(
        (
            v.value[0][0].start_mark.column - indent
            for _, v in profile.value
            if isinstance(v, yaml.MappingNode) and not v.flow_style and v.value
        ),
        2,
    )
    step = step if step > 0 else 2
    existing = {k.value: (k, v) for k, v in profile.value if isinstance(k, yaml.ScalarNode)}
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), non-overlapping
    appended = []
    for itype, entry in entries.items():
        block = render(itype, entry, indent=indent, step=step, newline=newline)
        if itype in existing:
            key, value = existing[itype]
            if text[_line_start(text, key.start_mark.index) : key.start_mark.index].strip():
                raise WriteRefused(f"{label}: {PROFILE_KEY}.{itype}: shares its line with other text")
            edits.append((_line_start(text, key.start_mark.index), _line_end(text, _last_end(value)), block))
        else:
            appended.append(block)
    if appended:
        at = _line_end(text, _last_end(profile.value[-1][1]))
        prefix = "" if at == 0 or text[at - 1] == "\n" else newline  # the file's last line had no newline
        edits.append((at, at, prefix + "".join(appended)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _expected(old: object, entries: Mapping[str, Mapping]) -> object:
    data = dict(old)  # type: ignore[call-overload]  # splice refused any root but a mapping
    data[PROFILE_KEY] = {**data[PROFILE_KEY], **{k: dict(v) for k, v in entries.items()}}
    return data


def check_loads(path: Path, config_dir: Path, new_text: str) -> None:
    """Load a copy of the whole config directory holding the new text; the directory keeps its name so the
    problems read as they would from the real one."""
    from inferstack import config  # the loader sits above capacity: only the writer's check needs it

    with tempfile.TemporaryDirectory(prefix="inferstack-profile-") as tmp:
        copy = Path(tmp) / config_dir.resolve().name
        shutil.copytree(config_dir, copy, symlinks=True)
        (copy / path.resolve().relative_to(config_dir.resolve())).write_bytes(new_text.encode("utf-8"))
        try:
            config.load(copy)
        except config.ConfigError as exc:
            problems = "; ".join(str(p) for p in exc.problems[:3])
            more = f" (and {len(exc.problems) - 3} more)" if len(exc.problems) > 3 else ""
            raise WriteRefused(
                f"{path}: not written: with the new entry the config would not load: {problems}{more}"
            ) from None


def new_text(path: Path, entries: Mapping[str, Mapping]) -> tuple[str, str]:
    """(old text, new text) of `path` with `entries` written; the new one checked to parse back to exactly the
    old data plus the entries."""
    try:
        old = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WriteRefused(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    text = splice(old, entries, str(path))
    try:
        before, after = yaml.safe_load(old), yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WriteRefused(f"{path}: the edit would not parse: {' '.join(str(exc).split())}") from None
    if after != _expected(before, entries):
        raise WriteRefused(f"{path}: the edit would change more than {PROFILE_KEY}'s entries; not written")
    return old, text


def write(path: Path, config_dir: Path, entries: Mapping[str, Mapping]) -> str:
    """Write `entries` into the model file `path` of `config_dir` whole or not at all; returns the new text."""
    _, text = new_text(path, entries)
    check_loads(path, config_dir, text)
    try:
        atomic_write.write_text(path, text)
    except OSError as exc:
        raise WriteRefused(f"{path}: cannot write: {exc.strerror or exc}") from None
    return text
