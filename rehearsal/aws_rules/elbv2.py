"""Elastic Load Balancing rules moto 5.2.5 does not enforce."""

from __future__ import annotations

from rehearsal.emulator_patch import Patch, Undo, replace


def _rule_priority_in_use() -> Undo:
    """A listener's rules hold distinct priorities: SetRulePriorities (what CloudFormation calls when a listener
    rule's Priority changes) and CreateRule answer PriorityInUse for one another rule of the listener holds
    (https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_SetRulePriorities.html, Errors).
    During a stack update CloudFormation creates and updates resources first, independent ones in parallel, and
    deletes the old and removed ones only in the cleanup phase at the end, UPDATE_COMPLETE_CLEANUP_IN_PROGRESS
    ("Monitor the progress of a stack update",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-monitor-stack.html):
    a rule cannot take a priority that a removed rule, or another rule moving away in the same update, still holds
    when the update starts.

    moto's CloudFormation ignores a listener rule's changed Priority (its update writes conditions and actions
    only) and retries a failed update in a later pass. Here: a stack update whose listener rule asks for a priority
    another rule of its listener holds when the update starts (a removed rule holds its own until cleanup: rule
    removals-in-cleanup) fails with PriorityInUse before anything changes; a changed priority is applied."""
    from moto.cloudformation.parsing import ResourceMap
    from moto.elbv2.exceptions import PriorityInUseError
    from moto.elbv2.models import FakeListenerRule

    original_update = ResourceMap.__dict__["update"]
    original_rule_update = FakeListenerRule.__dict__["update_from_cloudformation_json"].__func__

    def update(self, template: dict, parameters: dict | None = None) -> None:
        diff = self.build_resource_diff(template, parameters)
        new = template.get("Resources") or {}
        held = {
            (r.listener_arn, int(r.priority)): name
            for name, r in self._parsed_resources.items()
            if isinstance(r, FakeListenerRule)
        }
        for name in diff["Modify"]:
            current = self._parsed_resources.get(name)
            wanted = (new[name].get("Properties") or {}).get("Priority")
            if not isinstance(current, FakeListenerRule) or wanted is None or int(wanted) == int(current.priority):
                continue
            holder = held.get((current.listener_arn, int(wanted)))
            if holder is not None and holder != name:
                raise PriorityInUseError()
        return original_update(self, template, parameters)

    def update_rule(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        rule = original_rule_update(
            cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
        )
        wanted = (cloudformation_json.get("Properties") or {}).get("Priority")
        if wanted is not None:
            rule.priority = int(wanted)  # checked free when the update started
        return rule

    undo_update = replace(ResourceMap, "update", update)
    undo_rule = replace(FakeListenerRule, "update_from_cloudformation_json", classmethod(update_rule))

    def undo() -> None:
        undo_rule()
        undo_update()

    return undo


RULES = (
    Patch(
        "listener-rule-priority-in-use",
        "a stack update may move a listener rule to a priority another rule of the listener holds (moto ignores "
        "a changed Priority and retries failed updates); AWS answers PriorityInUse",
        _rule_priority_in_use,
    ),
)
