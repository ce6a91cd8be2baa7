"""Parse a YAML file into plain data plus a map from key path to line number, for error messages.

PyYAML silently keeps the last of two equal keys; a config tool must not, so duplicates are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

KeyPath = tuple[str | int, ...]


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
    def __init__(self, line: int | None, message: str):
        self.line = line
        super().__init__(message)


def parse(path: Path) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlSyntaxError(None, f"cannot read file: {exc}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise YamlSyntaxError(line, f"malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(None, f"malformed YAML: {exc}") from None
    finally:
        loader.dispose()
    doc = YamlDocument(data)
    if node is not None:
        _index(node, (), doc)
    return doc


def _index(node: yaml.Node, path: KeyPath, doc: YamlDocument) -> None:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                doc.duplicate_keys.append((path + (key,), key_node.start_mark.line + 1))
            seen.add(key)
            doc.lines[path + (key,)] = key_node.start_mark.line + 1
            _index(value_node, path + (key,), doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, path + (index,), doc)
