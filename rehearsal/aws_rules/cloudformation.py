"""CloudFormation rules moto 5.2.5 does not follow."""

from __future__ import annotations

from rehearsal.emulator_patch import Patch, Undo, replace


def _removals_in_cleanup() -> Undo:
    """A stack update creates new resources and updates changed ones first, and deletes the resources the new
    template no longer has only in the cleanup phase at its end, UPDATE_COMPLETE_CLEANUP_IN_PROGRESS ("Monitor the
    progress of a stack update",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-monitor-stack.html):
    until then a removed resource still holds what it held (a name, a listener rule's priority, a target group a
    rule forwards to). moto deletes the removed resources before it creates or updates anything, so an update that
    AWS would refuse (a new resource taking a removed one's name) passes. Here the removals run after the creates
    and updates, in moto's own dependency-retrying passes."""
    from moto.cloudformation.parsing import MAX_UPDATE_ATTEMPTS, ResourceMap

    original = ResourceMap.__dict__["update"]

    def update(self, template: dict, parameters: dict | None = None) -> None:
        removed = self.build_resource_diff(template, parameters)["Remove"]
        if not removed:
            return original(self, template, parameters)
        old = dict(self._resource_json_map)
        resources = template.get("Resources") or {}
        original(self, {**template, "Resources": {**resources, **{n: old[n] for n in removed}}}, parameters)
        remaining, last = list(removed), None
        for _ in range(MAX_UPDATE_ATTEMPTS):
            for name in list(remaining):
                try:
                    if name in self._parsed_resources:
                        self._delete_resource(self._parsed_resources[name], old[name])
                except Exception as exc:  # a dependency still in place: the next pass, as moto does
                    last = exc
                    continue
                self._parsed_resources.pop(name, None)
                remaining.remove(name)
            if not remaining:
                break
        if remaining and last is not None:
            raise last
        self._template = template
        self._resource_json_map = resources

    return replace(ResourceMap, "update", update)


RULES = (
    Patch(
        "removals-in-cleanup",
        "a stack update deletes the resources it removes before it creates or updates any (a new resource may take "
        "a removed one's name or priority); AWS deletes them in the cleanup phase, after the updates",
        _removals_in_cleanup,
    ),
)
