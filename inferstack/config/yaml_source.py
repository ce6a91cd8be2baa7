"""Parse a YAML file into plain data plus a map from key path to line number, for error messages.

PyYAML silently keeps the last of two equal keys; a config tool must not, so duplicates are reported.

A config file is untrusted input, and YAML aliases make a few bytes describe an exponential tree
("billion laughs": nine anchors, each a list of nine aliases of the previous one, expand to 9**9
nodes). Nothing here, nor pydantic after it, may ever walk that tree, so the composer counts every
node as the expanded document would hold it, an alias counting the whole subtree it stands for, and
stops at the first node past a limit. The limits below are generous for hand-written configs and
keep the worst accepted document small enough to parse, validate and report on in well under a
second; each rejection is one line naming the file, the line and the key path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml

KeyPath = tuple[str | int, ...]

# The largest shipped config is 2.4 KB; 256 KiB leaves 100x that for a big environments.yaml, and
# pure-Python PyYAML (kept for its line marks) parses it in about half a second. Checked before parsing.
MAX_DOCUMENT_BYTES = 256 * 1024
# Nodes of the expanded document: every key, value and list item, an alias counting all the nodes of
# what it refers to. Shipped files hold 108 to 132; 10,000 is ~250 environments' worth, and a
# document at the limit composes and validates in tens of milliseconds. It is what stops alias bombs.
MAX_NODES = 10_000
# Nesting depth of the expanded document (the root is level 1). Shipped files nest 6 deep; 32 keeps the
# recursive composer, the key index and pydantic far from Python's recursion limit.
MAX_DEPTH = 32
# Integers beyond 64 bits describe nothing in a config (CloudFormation numbers are doubles, the widest
# field is a 2**34 byte count), and a 4,300-digit one stops Python's int() and repr() with a ValueError.
MAX_INTEGER = 2**63 - 1
_MAX_INTEGER_CHARS = 80  # any spelling of a 64-bit integer (sign, 0b prefix, underscores) fits in 80
_INT_TAG = "tag:yaml.org,2002:int"


@dataclass
class YamlDocument:
    data: object
    lines: dict[KeyPath, int] = field(default_factory=dict)
    duplicate_keys: list[tuple[KeyPath, int]] = field(default_factory=list)

    def line_of(self, path: KeyPath) -> int | None:
        """Line of `path`, or of its nearest parent that exists (a missing key points at its parent)."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


class YamlSyntaxError(ValueError):
    def __init__(self, line: int | None, message: str, key: KeyPath = ()):
        self.line = line
        self.key = key
        super().__init__(message)


class _LimitExceeded(yaml.YAMLError):
    def __init__(self, message: str, mark: yaml.Mark | None, path: KeyPath):
        super().__init__(message)
        self.message, self.mark, self.path = message, mark, path


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer enforces MAX_NODES and MAX_DEPTH on the document as expanded, and
    whose constructor turns a scalar it cannot build (an out-of-range integer, a 13th month) into a
    marked error instead of a bare ValueError."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0
        self._deepest = 0
        self._path: list[str | int] = []
        # node -> (nodes, levels) it stands for once expanded; absent while the node is being composed
        self._extent: dict[yaml.Node, tuple[int, int]] = {}
        self._node_paths: dict[yaml.Node, KeyPath] = {}

    def _fail(self, message: str, mark: yaml.Mark | None) -> NoReturn:
        raise _LimitExceeded(message, mark, tuple(self._path))

    def compose_node(self, parent, index):
        key = _path_step(parent, index)
        if key is not None:
            self._path.append(key)
        try:
            return self._compose_counted(parent, index)
        finally:
            if key is not None:
                self._path.pop()

    def _compose_counted(self, parent, index):
        level = self._depth + 1
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is PyYAML's own error
                extent = self._extent.get(target)
                if extent is None:
                    self._fail(f"alias *{event.anchor} refers to a node that contains it", event.start_mark)
                nodes, levels = extent
                self._count(nodes, event.start_mark, f"alias *{event.anchor} ({nodes} nodes)")
                if level + levels - 1 > MAX_DEPTH:
                    self._fail(
                        f"alias *{event.anchor} nests the document deeper than {MAX_DEPTH} levels (the limit)",
                        event.start_mark,
                    )
                self._deepest = max(self._deepest, level + levels - 1)
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        if level > MAX_DEPTH:
            self._fail(f"nested deeper than {MAX_DEPTH} levels (the limit)", mark)
        self._count(1, mark, "this node")
        start, outer_deepest = self._nodes - 1, self._deepest
        self._depth, self._deepest = level, level
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth = level - 1
        self._extent[node] = (self._nodes - start, self._deepest - level + 1)
        self._node_paths.setdefault(node, tuple(self._path))
        self._deepest = max(outer_deepest, self._deepest)
        return node

    def _count(self, nodes: int, mark: yaml.Mark, what: str) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            self._fail(
                f"{what} takes the document past {MAX_NODES} nodes (the limit; an alias counts every node it repeats)",
                mark,
            )

    def construct_object(self, node, deep=False):
        path = self._node_paths.get(node, ())
        if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG and len(node.value) > _MAX_INTEGER_CHARS:
            raise _LimitExceeded(
                f"integer of {len(node.value)} characters is out of range (at most {MAX_INTEGER})",
                node.start_mark,
                path,
            )
        try:
            data = super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. 2024-13-01: the timestamp pattern, not a date
            raise _LimitExceeded(f"cannot read {node.value!r:.80}: {exc}", node.start_mark, path) from None
        if type(data) is int and abs(data) > MAX_INTEGER:
            raise _LimitExceeded(
                f"integer {node.value:.80} is out of range (at most {MAX_INTEGER})", node.start_mark, path
            )
        return data


def _path_step(parent: yaml.Node | None, index: object) -> str | int | None:
    """The key path element a child of `parent` adds: its key (mapping values), its position (sequence
    items); none for the root and for mapping keys themselves."""
    if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
        return index
    if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.Node):
        return index.value if isinstance(index, yaml.ScalarNode) else "?"
    return None


def parse(path: Path) -> YamlDocument:
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_DOCUMENT_BYTES + 1)
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise YamlSyntaxError(None, f"file is larger than {MAX_DOCUMENT_BYTES} bytes (the limit for a config file)")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlSyntaxError(None, f"cannot read file: {exc}") from None
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader rejects non-printable characters (NUL, ESC...) here
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:
        raise YamlSyntaxError(
            text.count("\n", 0, exc.position) + 1, f"malformed YAML: character #x{exc.character:04x} is not allowed"
        ) from None
    except _LimitExceeded as exc:
        raise YamlSyntaxError(exc.mark.line + 1 if exc.mark else None, exc.message, exc.path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise YamlSyntaxError(line, f"malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(None, f"malformed YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    doc = YamlDocument(data)
    if node is not None:
        _index(node, (), doc)
    return doc


def _index(node: yaml.Node, path: KeyPath, doc: YamlDocument) -> None:
    # Walks the expanded document: at most MAX_NODES nodes, MAX_DEPTH deep (the composer checked both).
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            if key in seen:
                doc.duplicate_keys.append((path + (key,), key_node.start_mark.line + 1))
            seen.add(key)
            doc.lines[path + (key,)] = key_node.start_mark.line + 1
            _index(value_node, path + (key,), doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, path + (index,), doc)
