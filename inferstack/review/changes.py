"""The diff report's data model: what changed in a resource (ValueChange, AssetUpdate, ResourceChange), in a
stack (StackDiff), in an environment (EnvironmentDiff) and in the whole comparison (Report), with their JSON
form and counts; and what a change is judged by: the protected resource types and the CI change classes.
diff.py builds it, classes.py assigns the classes, summary.py's StackSummary rides on it, the renderers read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstack.review.summary import StackSummary

# Serving and stateful resources: replacing one drops traffic or data (an inference component: its copies).
# A VPC is here too: replacing it replaces every subnet, endpoint and service attached to it.
PROTECTED_TYPES = frozenset(
    {
        "AWS::SageMaker::Endpoint",
        "AWS::SageMaker::InferenceComponent",
        "AWS::ECS::Service",
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        "AWS::AutoScaling::AutoScalingGroup",
        "AWS::KMS::Key",
        "AWS::S3::Bucket",
        "AWS::Logs::LogGroup",
        "AWS::EC2::VPC",
    }
)

# Classes of change a CI job can fail on (`--fail-on`); inferstack.review.classes assigns them.
CLASSES = (
    "replaces-serving-resource",
    "interrupts-traffic",
    "resets-scaled-count",
    "pauses-autoscaling",
    "touches-production-rule",
    "adds",
    "removes",
)


@dataclass
class ValueChange:
    path: str
    change: str  # "added" | "removed" | "modified"
    base: Any = None
    head: Any = None

    def to_json(self) -> dict:
        data = {"path": self.path, "change": self.change}
        if self.change != "added":
            data["base"] = self.base
        if self.change != "removed":
            data["head"] = self.head
        return data


@dataclass
class AssetUpdate:
    path: str
    kind: str  # "container image", "model artifact", "file asset (zip)", "file asset"
    asset: str  # the asset manifest's display name, when known
    base_hash: str | None
    head_hash: str | None

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "kind": self.kind,
            "asset": self.asset,
            "base_hash": self.base_hash,
            "head_hash": self.head_hash,
        }


@dataclass
class ResourceChange:
    stack: str
    logical_id: str
    type: str
    action: str  # "added" | "removed" | "modified" | "asset-update" (only asset hashes moved)
    construct_path: str | None = None
    base_type: str | None = None  # set when the Type changed
    changes: list[ValueChange] = field(default_factory=list)
    asset_updates: list[AssetUpdate] = field(default_factory=list)
    replacement: str | None = None  # None | "always" | "conditional"
    # {"path", "why", "refers_to"}: path is None for a Type or logical-ID change; refers_to names the replaced
    # resource when this replacement is a consequence of another.
    replacement_reasons: list[dict] = field(default_factory=list)
    replacing_paths: list[str] = field(default_factory=list)
    replaces: dict | None = None  # {"stack", "logical_id"}: the resource this new logical ID supersedes
    # {"path", "logical_id"}: references to replaced resources; their new physical ids flow in here.
    caused_by: list[dict] = field(default_factory=list)
    protected: bool = False
    categories: list[str] = field(default_factory=list)  # "iam", "security-groups", "scaling"
    # CI change classes (CLASSES), in that order, and why each applies
    classes: list[str] = field(default_factory=list)
    class_reasons: dict[str, str] = field(default_factory=dict)
    # The policy that keeps what CloudFormation would otherwise delete: "DeletionPolicy: Retain" for a removed
    # resource (or the old one of a changed logical ID), "UpdateReplacePolicy: Retain" for the old physical
    # resource of a replacement. None: deleted.
    kept_by_policy: str | None = None

    @property
    def cascaded(self) -> bool:
        """Replaced only because it refers to another replaced resource."""
        return bool(self.replacement_reasons) and all(r["refers_to"] for r in self.replacement_reasons)

    @property
    def changed_paths(self) -> list[str]:
        return [c.path for c in self.changes]

    def to_json(self) -> dict:
        return {
            "stack": self.stack,
            "logical_id": self.logical_id,
            "type": self.type,
            "base_type": self.base_type,
            "action": self.action,
            "construct_path": self.construct_path,
            "protected": self.protected,
            "categories": self.categories,
            "classes": self.classes,
            "class_reasons": self.class_reasons,
            "kept_by_policy": self.kept_by_policy,
            "replacement": self.replacement,
            "replacement_reasons": self.replacement_reasons,
            "replacing_paths": self.replacing_paths,
            "replaces": self.replaces,
            "caused_by": self.caused_by,
            "changed_paths": self.changed_paths,
            "changes": [c.to_json() for c in self.changes],
            "asset_updates": [a.to_json() for a in self.asset_updates],
        }


# An environment synthesized on one side only: most often a `cdk synth` of fewer environments (dev only) on
# that side, not an environment created or deleted. Its stacks are listed and summarised, not compared.
ONLY_IN_BASE, ONLY_IN_HEAD = "only-in-base", "only-in-head"
ONE_SIDED = (ONLY_IN_BASE, ONLY_IN_HEAD)


@dataclass
class StackDiff:
    name: str
    stack_name: str
    status: str  # "added" | "removed" | "modified" | "unchanged" | "only-in-base" | "only-in-head"
    resources: list[ResourceChange] = field(default_factory=list)
    template_changes: list[ValueChange] = field(default_factory=list)  # Outputs, Parameters, Conditions...
    classes: list[str] = field(default_factory=list)  # ["adds"] for an added stack, ["removes"] for a removed one
    # What the stack runs and may do, from its template: set for added, removed and one-sided stacks.
    summary: StackSummary | None = None
    resource_count: int = 0  # resources in its template (the head's; the base's when it is removed)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "stack_name": self.stack_name,
            "status": self.status,
            "classes": self.classes,
            "resource_count": self.resource_count,
            "counts": counts(self.resources),
            "class_counts": class_counts(self.resources),
            "summary": self.summary.to_json() if self.summary else None,
            "resources": [r.to_json() for r in self.resources],
            "template_changes": [c.to_json() for c in self.template_changes],
        }


@dataclass
class EnvironmentDiff:
    name: str
    status: str  # "added" | "removed" | "modified" | "unchanged" | "only-in-base" | "only-in-head"
    stacks: list[StackDiff] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def compared(self) -> bool:
        return self.status not in ONE_SIDED

    @property
    def note(self) -> str | None:
        if self.status == ONLY_IN_BASE:
            return f"environment {self.name}: only in base (not synthesized in head?)"
        if self.status == ONLY_IN_HEAD:
            return f"environment {self.name}: only in head (not synthesized in base?)"
        return None

    @property
    def resources(self) -> list[ResourceChange]:
        return [r for s in self.stacks for r in s.resources]

    def retirement(self) -> dict | None:
        """What a removal deletes and what its policies keep, when this environment removes anything."""
        # A changed logical ID removes the old one too (CloudFormation deletes it after creating the new one).
        removed = [r for r in self.resources if r.action == "removed" or r.replaces]
        if not removed:
            return None
        return {
            "removed_stacks": [s.name for s in self.stacks if s.status == "removed"],
            "deleted": sum(not r.kept_by_policy for r in removed),
            "kept": [
                {
                    "stack": r.stack,
                    "logical_id": (r.replaces or {}).get("logical_id", r.logical_id),
                    "type": r.base_type or r.type,
                    "policy": r.kept_by_policy,
                }
                for r in removed
                if r.kept_by_policy
            ],
            "ecr_images": ECR_IMAGES_NOTE,
        }

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "note": self.note,
            "counts": counts(self.resources),
            "class_counts": class_counts(self.resources),
            "warnings": self.warnings,
            "retirement": self.retirement(),
            "stacks": [s.to_json() for s in self.stacks],
        }


# What retiring a model never deletes: its images are in the CDK bootstrap repository (dev) and in the
# promoted repositories the release process copies them to; no stack of this app owns an ECR repository.
ECR_IMAGES_NOTE = (
    "ECR images are never deleted by a stack removal: they live in the bootstrap and promoted "
    "repositories, which no stack here owns"
)


@dataclass
class Report:
    base: str
    head: str
    environments: list[EnvironmentDiff]
    selected: list[str] | None = None  # --env, when given

    @property
    def resources(self) -> list[ResourceChange]:
        return [r for e in self.environments for r in e.resources]

    def protected_replacements(self) -> list[tuple[str, ResourceChange]]:
        return [(e.name, r) for e in self.environments for r in e.resources if r.protected and r.replacement]

    def one_sided(self) -> list[EnvironmentDiff]:
        return [e for e in self.environments if not e.compared]

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "base": self.base,
            "head": self.head,
            "selected_environments": self.selected,
            "counts": counts(self.resources),
            "class_counts": class_counts(self.resources),
            "protected_replacements": [f"{env}/{r.stack}/{r.logical_id}" for env, r in self.protected_replacements()],
            "environments_only_in_base": [e.name for e in self.environments if e.status == ONLY_IN_BASE],
            "environments_only_in_head": [e.name for e in self.environments if e.status == ONLY_IN_HEAD],
            "environments": [e.to_json() for e in self.environments],
        }


# 2: an environment synthesized on one side only is "only-in-base"/"only-in-head" and its stacks are not
# counted (1 called it "removed"/"added" and counted every resource); per-change classes, summaries.
SCHEMA_VERSION = 2


def class_counts(resources: list[ResourceChange]) -> dict[str, int]:
    """Resource changes per CI class (every class, zero included)."""
    return {c: sum(c in r.classes for r in resources) for c in CLASSES}


def counts(resources: list[ResourceChange]) -> dict[str, int]:
    return {
        "added": sum(r.action == "added" for r in resources),
        "removed": sum(r.action == "removed" for r in resources),
        "modified": sum(r.action == "modified" for r in resources),
        "replaced": sum(r.replacement is not None for r in resources),
        "asset_updates": sum(bool(r.asset_updates) for r in resources),
        "protected": sum(r.protected for r in resources),
    }
