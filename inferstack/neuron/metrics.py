"""The Neuron serving container's CloudWatch metrics, as the stacks alarm, scale and draw on them: namespace,
metric names and units, dimension sets and the runtime variables that shape them. Pure constants: the
container writes these (container/neuron/serving/emf.py, neuron_monitor_emf.py) and a test holds both sides equal."""

from __future__ import annotations

from types import MappingProxyType

NAMESPACE = "inferstack/Serving"

# Dimension keys. Service is SERVER_METRICS_SERVICE (default: the model name); Model is the served model's
# name (MODEL_NAME, or the SERVER_MODELS entry's); Worker is the worker's index in its model, from "0".
SERVICE = "Service"
MODEL = "Model"
WORKER = "Worker"
PER_MODEL = (SERVICE, MODEL)
PER_WORKER = (SERVICE, MODEL, WORKER)
PER_TASK = (SERVICE,)

# Written by every worker once per SERVER_METRICS_INTERVAL_S, under both dimension sets.
REQUEST_LATENCY = "RequestLatency"  # each inference request, received to response ready, in the server
INFERENCE_LATENCY = "InferenceLatency"  # each executed batch: tokenize + model
BATCH_SIZE = "BatchSize"  # rows per executed batch
QUEUE_DEPTH = "QueueDepth"  # requests waiting for the model, sampled every second
IN_FLIGHT = "InFlight"  # requests accepted and not yet answered, sampled every second
REQUESTS = "Requests"  # inference requests answered (any status); 0 when idle
SERVER_ERRORS = "ServerErrors"  # of those, answered 5xx; 0 when none
SERVING_UNITS = MappingProxyType(
    {
        REQUEST_LATENCY: "Milliseconds",
        INFERENCE_LATENCY: "Milliseconds",
        BATCH_SIZE: "Count",
        QUEUE_DEPTH: "Count",
        IN_FLIGHT: "Count",
        REQUESTS: "Count",
        SERVER_ERRORS: "Count",
    }
)
SERVING_DIMENSION_SETS = (PER_MODEL, PER_WORKER)
# Written beside those, under the same dimension sets, only in an interval that refused a request (emf.py's
# RECORDED_UNITS: no data point, not 0, when none was): of ServerErrors, the 503s of admission, requests the
# server would not have answered within the SLO. Shedding, not failure: the alarms subtract it from the 5xx.
REJECTED = "Rejected"
ADMISSION_UNITS = MappingProxyType({REJECTED: "Count"})

# From neuron-monitor, once per SERVER_METRICS_INTERVAL_S: per model (PER_MODEL) and per task (PER_TASK).
NEURONCORE_UTILIZATION = "NeuronCoreUtilization"  # one value per NeuronCore in use
DEVICE_MEMORY_USED = "NeuronDeviceMemoryUsed"
HOST_MEMORY_USED = "NeuronHostMemoryUsed"
EXECUTION_ERRORS = "NeuronExecutionErrors"
NEURON_MONITOR_UNITS = MappingProxyType(
    {
        NEURONCORE_UTILIZATION: "Percent",
        DEVICE_MEMORY_USED: "Bytes",
        HOST_MEMORY_USED: "Bytes",
        EXECUTION_ERRORS: "Count",
    }
)
NEURON_MONITOR_DIMENSION_SETS = (PER_MODEL, PER_TASK)

# The container's runtime environment (container/neuron/serving/server_settings.py).
METRICS_ENV = "SERVER_METRICS"  # "emf" (default) or "off"
METRICS_SERVICE_ENV = "SERVER_METRICS_SERVICE"
METRICS_INTERVAL_ENV = "SERVER_METRICS_INTERVAL_S"  # whole seconds, 1-3600
NEURON_MONITOR_ENV = "SERVER_NEURON_MONITOR"  # an executable, or "off"
DEFAULT_INTERVAL_S = 60
