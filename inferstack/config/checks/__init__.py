"""Rules that span several fields, files or the instance catalog, one module per concern (every model file,
every fleet, each kind's own, off-hours windows, estimates, the pipeline, the environments). Each yields
(key path, message) pairs so the loader can attach file and line; nothing here raises on the first problem.

The loader calls these entry points, in the order it reports problems (inferstack/config/loader.py)."""

from inferstack.config.checks.common import did_you_mean
from inferstack.config.checks.environments import check_accounts, check_networks
from inferstack.config.checks.estimates import estimate_warnings, fleet_estimate_warnings
from inferstack.config.checks.fleets import check_fleets, fleet_too_small, fleet_warnings
from inferstack.config.checks.models import check_model, model_warnings
from inferstack.config.checks.pipeline import check_pipeline, check_pipeline_capacity

__all__ = [
    "check_accounts",
    "check_fleets",
    "check_model",
    "check_networks",
    "check_pipeline",
    "check_pipeline_capacity",
    "did_you_mean",
    "estimate_warnings",
    "fleet_estimate_warnings",
    "fleet_too_small",
    "fleet_warnings",
    "model_warnings",
]
