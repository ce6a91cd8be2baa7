"""What every change to the emulator is: a named patch applied in moto's server process before it starts
(a workaround for a moto defect, rehearsal/moto_patches.py, or a rule AWS enforces that moto does not,
rehearsal/aws_rules.py), with the way to undo it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Undo = Callable[[], None]


@dataclass(frozen=True)
class Patch:
    name: str
    defect: str  # what moto does wrong (accepts what AWS refuses, or gets wrong), as the rehearsal report lists it
    apply: Callable[[], Undo]


def replace(owner, attribute: str, replacement) -> Undo:
    original = owner.__dict__[attribute]
    setattr(owner, attribute, replacement)
    return lambda: setattr(owner, attribute, original)
