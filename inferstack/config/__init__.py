"""Configuration: the typed schema of model_configs/ and its loader."""

from inferstack.config.loader import Project, load
from inferstack.schema.models import (
    Environment, NeuronEcsModel, TritonSageMakerModel,
)
from inferstack.config.problems import ConfigError, Problem

__all__ = ["ConfigError", "Environment", "NeuronEcsModel", "Problem", "Project", "TritonSageMakerModel", "load"]
