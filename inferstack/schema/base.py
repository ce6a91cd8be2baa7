"""What every schema module shares: the frozen base model, names, positive numbers and instance types."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from inferstack.schema import instances

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$"


class Frozen(BaseModel):
    # allow_inf_nan=False: no number in a config may be nan or infinite (YAML's .nan/.inf, 1.0e400, or a
    # string such as "1e400" that parses to infinity); every capacity formula assumes finite inputs.
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)


Name = Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case letters, digits and dashes")]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]


def _known_instance(value: str) -> str:
    instances.get(value)  # raises UnknownInstanceType (a ValueError) with the known list
    return value


InstanceType = Annotated[
    str,
    AfterValidator(_known_instance),
    Field(
        description="an instance type from inferstack.schema.instances",
        json_schema_extra={"enum": sorted(instances.INSTANCES)},
    ),
]
