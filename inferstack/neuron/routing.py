"""How a Neuron service's models are routed: the target-group limit and listener rule priorities, pure, so
validation and the construct agree."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

# "For services that use an Application Load Balancer or Network Load Balancer, you cannot attach more than
# five target groups to a service" (ECS developer guide, at MAX_TARGET_GROUPS_SOURCE). A fleet routes each model
# to its own target group.
MAX_TARGET_GROUPS = 5
MAX_TARGET_GROUPS_SOURCE = ("https://docs.aws.amazon.com/AmazonECS/latest/developerguide/"
                            "register-multiple-targetgroups.html")
MAX_RULE_PRIORITY = 50_000  # listener rule priorities run 1..50000
# Traffic-shifting rollouts: the production rule that takes every path not routed elsewhere (a dedicated
# model's whole listener, a fleet's first model) is evaluated last.
CATCH_ALL_PRIORITY = MAX_RULE_PRIORITY


def rule_priority(model: str) -> int:
    """A listener rule's priority from the model's name alone: deterministic, and unchanged when a fleet gains,
    loses or reorders models (priorities from positions would shift, and a rule updated to a priority another
    rule still holds fails the stack update). The rules' paths are disjoint, so the order never matters."""
    return 1 + zlib.crc32(model.encode()) % MAX_RULE_PRIORITY


def priority_clashes(models: Sequence[str], *, catch_all_first: bool) -> list[tuple[int, str]]:
    """(index, message) for each model whose rule priority another rule of the listener already holds."""
    taken: dict[int, str] = {}
    clashes = []
    for index, model in enumerate(models):
        priority = CATCH_ALL_PRIORITY if catch_all_first and index == 0 else rule_priority(model)
        other = taken.setdefault(priority, model)
        if other != model:
            clashes.append((index, f"{model}'s listener rule priority {priority} is also {other}'s "
                                   f"(priorities come from the names: rename one)"))
    return clashes
