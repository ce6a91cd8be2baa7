"""On-demand prices per instance hour and the cost arithmetic built on them.

The table is a dated snapshot, not a live price list: every entry carries where it came from and when.
Environments override any entry (`prices:` in environments.yaml), e.g. for another region, a
negotiated rate or a Savings Plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferstack.schema import instances

HOURS_PER_MONTH = 730  # AWS's own convention for monthly estimates (8,760 h / 12)

_EC2 = "aws.amazon.com/ec2/pricing/on-demand, Linux, us-east-1"
_SAGEMAKER = "aws.amazon.com/sagemaker/pricing, real-time inference, us-east-1"
RECORDED = "2025-10"


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str
    recorded: str


def _table() -> dict[str, Price]:
    ec2 = {
        "inf1.xlarge": 0.228,
        "inf1.2xlarge": 0.362,
        "inf1.6xlarge": 1.18,
        "inf1.24xlarge": 4.721,
        "inf2.xlarge": 0.7582,
        "inf2.8xlarge": 1.9679,
        "inf2.24xlarge": 6.4906,
        "inf2.48xlarge": 12.9813,
    }
    sagemaker = {
        "ml.g4dn.xlarge": 0.736,
        "ml.g4dn.2xlarge": 0.94,
        "ml.g4dn.4xlarge": 1.505,
        "ml.g4dn.8xlarge": 2.72,
        "ml.g4dn.12xlarge": 4.89,
        "ml.g4dn.16xlarge": 5.44,
        "ml.g5.xlarge": 1.408,
        "ml.g5.2xlarge": 1.515,
        "ml.g5.4xlarge": 2.03,
        "ml.g5.12xlarge": 7.09,
    }
    table = {name: Price(p, _EC2, RECORDED) for name, p in ec2.items()}
    table |= {name: Price(p, _SAGEMAKER, RECORDED) for name, p in sagemaker.items()}
    return table


PRICES: Mapping[str, Price] = _table()


class UnknownPrice(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def price(instance_type: str, overrides: Mapping[str, float] | None = None) -> Price:
    """The override for `instance_type` if the environment sets one, else the table's entry."""
    if overrides and instance_type in overrides:
        return Price(overrides[instance_type], "environments.yaml override", "")
    instances.get(instance_type)  # an unknown type is a clearer error than a missing price
    try:
        return PRICES[instance_type]
    except KeyError:
        raise UnknownPrice(f"no price for {instance_type}; add it under the environment's prices:") from None


def cost_per_million(usd_per_hour: float, inferences_per_second: float) -> float:
    """USD per 1M inferences for one instance serving `inferences_per_second` around the clock."""
    return usd_per_hour / (inferences_per_second * 3600) * 1e6
