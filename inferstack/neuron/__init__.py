"""Inferentia on ECS: the task-definition facts a Neuron host needs (devices, cores, placement)."""
