"""Inferentia on ECS: the task-definition facts a Neuron host needs (devices, cores, placement), its
deployments, and the serving container's metrics contract (metrics.py)."""
