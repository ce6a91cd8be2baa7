"""A model file: one of the model kinds, told apart by its `kind:` (the kinds' facts: inferstack/schema/kinds.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from inferstack.schema.neuron_ecs import NeuronEcsModel
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

ModelConfig = Annotated[NeuronEcsModel | TritonSageMakerModel, Field(discriminator="kind")]
