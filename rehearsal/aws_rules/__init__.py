"""Rules a real AWS account enforces that moto 5.2.5 does not: each one added to the emulator (in its own
process, before its server starts, as moto_patches' workarounds are) so the CLI deploy rehearsal meets the refusal
a real account would give, instead of an emulator kinder than AWS. One module per service; each rule names the
AWS documentation it encodes (in its docstring) and has a test (tests/rehearsal/test_aws_rules_<service>.py, named
test_rule_<name>) that shows plain moto accepting what AWS refuses, and the rule refusing it.

They are applied with the workarounds (moto_patches.apply_all, moto_server) and listed apart in the rehearsal's
report."""

from __future__ import annotations

from rehearsal.aws_rules import cloudformation, elbv2, sagemaker, sts
from rehearsal.emulator_patch import Patch

# In this order: the listener-rule check runs first, on the stack as it is when an update starts.
RULES: tuple[Patch, ...] = (*sts.RULES, *cloudformation.RULES, *elbv2.RULES, *sagemaker.RULES)
