"""How a Neuron service's models are routed: the target-group limit and listener rule priorities, pure, so
validation and the construct agree."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

# "For services that use an Application Load Balancer or Network Load Balancer, you cannot attach more than
# five target groups to a service" (ECS developer guide, at MAX_TARGET_GROUPS_SOURCE). A fleet routes each model
# to its own target group.
MAX_TARGET_GROUPS = 5
MAX_TARGET_GROUPS_SOURCE = (
    "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/register-multiple-targetgroups.html"
)
MAX_RULE_PRIORITY = 50_000  # listener rule priorities run 1..50000
# A rule for a model's own paths takes its priority below CATCH_ALL_FIRST; a catch-all rule (`/*`: a dedicated
# model's, or a traffic-shifting fleet's first member's) above it, so it is evaluated after every path rule.
CATCH_ALL_FIRST = 40_001


def _name_hash(model: str) -> int:
    return zlib.crc32(model.encode())


def rule_priority(model: str) -> int:
    """The priority of the rule for `model`'s own paths, from its name alone (1..40000): deterministic, and
    unchanged when a fleet gains, loses or reorders models (priorities from positions would shift, and a rule
    updated to a priority another rule still holds fails the stack update: PriorityInUse). The rules' paths are
    disjoint, so their order never matters. The name's priority as it was before catch-all priorities had a range
    of their own (1 + crc32 mod 50000), folded below that range, so most rules kept theirs."""
    return 1 + (_name_hash(model) % MAX_RULE_PRIORITY) % (CATCH_ALL_FIRST - 1)


def catch_all_priority(model: str) -> int:
    """The priority of `model`'s catch-all rule (40001..50000), from its name too: when a fleet's first member
    changes (a reorder, or the first retired), the new first member's catch-all never asks for the priority the
    old one's holds until CloudFormation's cleanup deletes it, nor for one a path rule holds."""
    return CATCH_ALL_FIRST + _name_hash(model) % (MAX_RULE_PRIORITY - CATCH_ALL_FIRST + 1)


def priority_clashes(models: Sequence[str], *, shifting: bool) -> list[tuple[int, str]]:
    """(index, message) for each model whose rule priority another model's rule already holds. `shifting`: a
    traffic-shifting fleet, whose first member's rule is a catch-all; since any member may become first, every
    member's catch-all priority must be its own too."""
    clashes = []
    for kind, priority_of in (("listener rule", rule_priority),) + (
        (("catch-all rule", catch_all_priority),) if shifting else ()
    ):
        taken: dict[int, str] = {}
        for index, model in enumerate(models):
            priority = priority_of(model)
            other = taken.setdefault(priority, model)
            if other != model:
                clashes.append(
                    (
                        index,
                        f"{model}'s {kind} priority {priority} is also {other}'s "
                        f"(priorities come from the names: rename one)",
                    )
                )
    return clashes
