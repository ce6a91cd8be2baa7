"""The diff report as JSON, for bots and pipelines. The structure is stable; `schema_version` changes
when a field is removed or changes meaning (adding a field does not change it).

    {
      "schema_version": 1,
      "base": "<path>", "head": "<path>",
      "counts": {"added", "removed", "modified", "replaced", "asset_updates", "protected"},   # ints
      "protected_replacements": ["<env>/<stack>/<logical id>", ...],   # what --fail-on-replace fails on
      "diagrams": [{"environment", "dot", "svg" (null when not rendered), "note"}],   # when written
      "environments": [{
        "name", "status": "added" | "removed" | "modified" | "unchanged",
        "counts": {...}, "warnings": ["<text>", ...],
        "stacks": [{
          "name": "Foundation", "stack_name": "dev-Foundation",
          "status": "added" | "removed" | "modified" | "unchanged", "counts": {...},
          "resources": [{
            "stack", "logical_id", "type", "base_type" (set when Type changed), "construct_path",
            "action": "added" | "removed" | "modified" | "asset-update",
            "protected": bool, "categories": ["iam" | "security-groups" | "scaling", ...],
            "replacement": null | "always" | "conditional",
            "replacement_reasons": [{"path" (null for Type/logical-ID changes), "why", "refers_to"}],
            "replacing_paths": ["Properties.ProductionVariants[0].InstanceType", ...],
            "replaces": null | {"stack", "logical_id"},   # the resource a new logical ID supersedes
            "caused_by": [{"path", "logical_id"}],        # references to replaced resources
            "changed_paths": ["Properties.X.Y", ...],     # excluding asset-hash-only changes
            "changes": [{"path", "change": "added" | "removed" | "modified", "base", "head"}],
            "asset_updates": [{"path", "kind", "asset", "base_hash", "head_hash"}]
          }],
          "template_changes": [{"path": "Outputs.X.Value", "change", "base", "head"}]
        }]
      }]
    }

Lists are sorted (environments and stacks by name, resources by logical ID), so equal inputs give
byte-identical output."""

from __future__ import annotations

import json

from inferstack.review.diff import Report


def render(report: Report, *, diagrams: list[dict] | None = None) -> str:
    data = report.to_json()
    if diagrams is not None:
        data["diagrams"] = diagrams
    return json.dumps(data, indent=2) + "\n"
