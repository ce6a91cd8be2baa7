"""A CloudFormation template value walked: a location in it (keys and list indexes) and the resources it
refers to. What the diff, its CI classes and the stack summaries share."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

Path = tuple[str | int, ...]


def references(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """(path, logical id) for every Ref / Fn::GetAtt / Fn::Sub reference inside `value`."""
    if isinstance(value, dict):
        if len(value) == 1:
            key, arg = next(iter(value.items()))
            if key == "Ref" and isinstance(arg, str):
                yield path, arg
                return
            if key == "Fn::GetAtt":
                target = arg[0] if isinstance(arg, list) and arg else str(arg).split(".", 1)[0]
                yield path, target
                return
            if key == "Fn::Sub":
                text = arg[0] if isinstance(arg, list) else arg
                for name in re.findall(r"\$\{([^}!][^}.]*)(?:\.[^}]*)?\}", str(text)):
                    yield path, name
        for key, item in value.items():
            yield from references(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from references(item, path + (i,))
