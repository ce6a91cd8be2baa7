"""Where the Neuron serving image builds from: container/neuron/, the Docker context of every neuron-ecs model's
image and of every neuron-cores fleet's one image (its Dockerfile per Neuron generation: inferstack/neuron/task.py).
The twin of inferstack/triton/image.py: the stacks build from here, and validate looks for a local checkpoint's
config.json inside this context."""

from __future__ import annotations

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
CONTEXT = "container/neuron"  # relative to the repository root
DIRECTORY = REPOSITORY_ROOT / CONTEXT
# What a model file's source.local_path is relative to: the image copies it from its own context.
LOCAL_PATH_BASE = CONTEXT
