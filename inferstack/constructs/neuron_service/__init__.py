"""Models served on Inferentia by ECS: EC2 capacity from the ECS-optimized AL2023 Neuron AMI, one task
per instance owning every Neuron device, behind an Application Load Balancer, scaled on requests per
task, with alarms and a dashboard. The task serves one model (a dedicated model, planned by
inferstack.capacity.planning) or several on disjoint NeuronCore ranges and ports (a neuron-cores fleet,
planned by inferstack.capacity.packing): then each model has its own target group, listener rule, scaling
policy, alarms and dashboard row. Optional off-hours windows scale the service, and the instances with it,
down (to zero) and back.

Deploys follow the model's or fleet's ECS rollout (inferstack.neuron.deployment): rolling, or ECS native
blue/green, linear or canary with a second (alternate) target group and a production listener rule per model;
every strategy rolls back on the models' SLO alarms. The task writes its own CloudWatch metrics (EMF, names
in inferstack.neuron.metrics) under a Service dimension fixed at synth; dashboards, a Neuron alarm and a
concurrency scaling policy per model read them.

One construct, NeuronEcsService (service.py), composed of parts that are plain functions creating their
resources in its scope, so its resources keep their construct paths and logical ids: capacity.py (instances,
capacity provider, release on delete), task.py (task definition, ECS service), rollout.py (deployment
settings, rollback alarms), load_balancer.py and routing.py (load balancer, listener, target groups, rules),
scaling.py (target tracking, off-hours windows), metrics.py and observability.py (metrics, alarms, dashboard).
Each part receives the read-only ServiceContext (context.py: the served models, the task, the plans) and the
resources it needs, and returns what it makes (a frozen dataclass, or the one resource), so NeuronEcsService's
constructor reads as the data flow; served.py holds what the parts and the context share, and no part
imports service.py."""

from inferstack.constructs.neuron_service.capacity import AMI_PARAMETER
from inferstack.constructs.neuron_service.served import ImageBuild, NeuronImage, ScheduledWindow, ServedModel
from inferstack.constructs.neuron_service.service import NeuronEcsService

__all__ = ["AMI_PARAMETER", "ImageBuild", "NeuronEcsService", "NeuronImage", "ScheduledWindow", "ServedModel"]
