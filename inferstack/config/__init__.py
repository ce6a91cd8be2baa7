"""Configuration: the typed schema of model_configs/ and its loader."""

from inferstack.config.loader import Project, load
from inferstack.config.problems import ConfigError, Problem
from inferstack.schema.environments import Environment
from inferstack.schema.neuron_ecs import NeuronEcsModel
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

__all__ = ["ConfigError", "Environment", "NeuronEcsModel", "Problem", "Project", "TritonSageMakerModel", "load"]
