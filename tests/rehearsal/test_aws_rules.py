"""Every rule of rehearsal/aws_rules is named, sourced, applied by the emulator and tested: each has a
test_rule_<name> in one of tests/rehearsal/test_aws_rules_<service>.py, which shows plain moto accepting what
AWS refuses and the rule refusing it."""

from __future__ import annotations

import ast
from pathlib import Path

from rehearsal import aws_rules, moto_patches


def rule_tests() -> set[str]:
    names = set()
    for path in Path(__file__).parent.glob("test_aws_rules_*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_rule_"):
                names.add(node.name.removeprefix("test_rule_").split("__")[0].replace("_", "-"))
    return names


def test_every_rule_is_named_sourced_and_tested():
    assert rule_tests() == {r.name for r in aws_rules.RULES}
    assert all(r.defect and r.apply.__doc__ and "docs.aws.amazon.com" in r.apply.__doc__ for r in aws_rules.RULES)
    assert all(r.name in moto_patches.BY_NAME for r in aws_rules.RULES)  # the server applies them
    assert not {r.name for r in aws_rules.RULES} & {p.name for p in moto_patches.PATCHES}
