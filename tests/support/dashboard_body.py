"""Read a synthesized DashboardBody as the JSON CloudWatch will get, to compare two dashboards by meaning
rather than by how CDK happened to split the Fn::Join."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def render_dashboard_body(body: str | dict) -> Any:
    """The body's JSON, parsed, with each intrinsic other than Fn::Join (which is concatenation) replaced
    by a deterministic placeholder string: "<Ref X>", "<GetAtt X.Attr>", else "<Fn::Name digest>"."""
    return json.loads(_render(body))


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not (isinstance(value, dict) and len(value) == 1):
        raise ValueError(f"not a string or an intrinsic: {value!r}")
    ((name, argument),) = value.items()
    if name == "Fn::Join":
        delimiter, parts = argument
        return delimiter.join(_render(part) for part in parts)
    if name == "Ref":
        return f"<Ref {argument}>"
    if name == "Fn::GetAtt":
        return f"<GetAtt {'.'.join(argument) if isinstance(argument, list) else argument}>"
    digest = hashlib.sha256(json.dumps(argument, sort_keys=True).encode()).hexdigest()[:12]
    return f"<{name} {digest}>"
