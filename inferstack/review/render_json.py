"""The diff report as JSON, for bots and pipelines. The structure is stable; `schema_version` changes
when a field is removed or changes meaning (adding a field does not change it). Version 2: an environment
synthesized on one side only is "only-in-base" / "only-in-head" and not counted (version 1 reported it
"removed" / "added" with every resource); CI change classes, stack summaries, retirement.

    {
      "schema_version": 2,
      "base": "<path>", "head": "<path>",
      "selected_environments": null | ["dev", ...],                    # --env
      "counts": {"added", "removed", "modified", "replaced", "asset_updates", "protected"},   # ints
      "class_counts": {"replaces-serving-resource", "interrupts-traffic", "resets-scaled-count",
                       "pauses-autoscaling", "touches-production-rule", "adds", "removes"},  # per class, ints
      "protected_replacements": ["<env>/<stack>/<logical id>", ...],   # what --fail-on-replace fails on
      "environments_only_in_base": ["staging", ...], "environments_only_in_head": [...],
      "diagrams": [{"environment", "dot", "svg" (null when not rendered), "note"}],   # when written
      "environments": [{
        "name", "status": "modified" | "unchanged" | "only-in-base" | "only-in-head",
        "note": null | "environment staging: only in base (not synthesized in head?)",
        "counts": {...}, "class_counts": {...}, "warnings": ["<text>", ...],
        "retirement": null | {                 # when anything is removed (or a logical ID changes)
          "removed_stacks": ["<stack>", ...], "deleted": int,
          "kept": [{"stack", "logical_id", "type", "policy": "DeletionPolicy: Retain"}],
          "ecr_images": "<why no image is deleted>"},
        "stacks": [{
          "name": "Foundation", "stack_name": "dev-Foundation",
          "status": "added" | "removed" | "modified" | "unchanged" | "only-in-base" | "only-in-head",
          "classes": [] | ["adds"] | ["removes"], "resource_count": int,
          "counts": {...}, "class_counts": {...},
          "summary": null | {                  # added, removed and one-sided stacks
            "capacity": [{"resource", "kind", "unit": "instances" | "tasks" | "copies" | <dimension>,
                          "min", "max" (int, or "(set at deploy)"), "instance_type", "on"}],
            "iam_actions": ["ecr:BatchGetImage", ...], "denied_actions": [...], "managed_policies": [...],
            "cost": null | {"usd_per_month_min", "usd_per_month_max"}, "cost_note": "<basis, or why none>"},
          "resources": [{
            "stack", "logical_id", "type", "base_type" (set when Type changed), "construct_path",
            "action": "added" | "removed" | "modified" | "asset-update",
            "protected": bool, "categories": ["iam" | "security-groups" | "scaling", ...],
            "classes": ["replaces-serving-resource" | "interrupts-traffic" | "resets-scaled-count" |
                        "pauses-autoscaling" | "touches-production-rule" | "adds" | "removes", ...],
            "class_reasons": {"<class>": "<why>"},
            "kept_by_policy": null | "DeletionPolicy: Retain" | "UpdateReplacePolicy: Retain" | ...,
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

from inferstack.review.changes import Report


def render(report: Report, *, diagrams: list[dict] | None = None) -> str:
    data = report.to_json()
    if diagrams is not None:
        data["diagrams"] = diagrams
    return json.dumps(data, indent=2) + "\n"
