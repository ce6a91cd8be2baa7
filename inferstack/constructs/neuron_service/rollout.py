"""How ECS replaces the tasks on a deploy (the model's or fleet's EcsRollout, inferstack.neuron.deployment) and
what rolls a deploy back: the ECS service's deployment settings, and its deployment alarms. Apart from the
service because CDK renders rolling-update settings whatever the strategy, and the alarms ECS watches exist
only once observability has made them."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ecs as ecs

from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.neuron.deployment import EcsRollout


def deployment_options(rollout: EcsRollout) -> dict:
    """Ec2Service keyword arguments for the rollout. The strategy is always explicit, ROLLING included: an
    update that drops the property would leave the service on the strategy it had. The circuit breaker
    applies to rolling updates only (ECS API, DeploymentCircuitBreaker); the blue/green family rolls back on
    the deployment alarms (enabled on every strategy once the alarms exist: `roll_back_on_alarms`)."""
    options: dict = {"deployment_strategy": ecs.DeploymentStrategy[rollout.strategy]}
    if not rollout.shifts_traffic:
        options["circuit_breaker"] = ecs.DeploymentCircuitBreaker(enable=True, rollback=True)
        return options
    assert rollout.bake_time_minutes is not None
    options["bake_time"] = cdk.Duration.minutes(rollout.bake_time_minutes)
    if rollout.strategy == "CANARY":
        assert rollout.canary_percent is not None and rollout.canary_bake_minutes is not None
        options["canary_configuration"] = ecs.TrafficShiftConfig(
            step_percent=rollout.canary_percent, step_bake_time=cdk.Duration.minutes(rollout.canary_bake_minutes)
        )
    elif rollout.strategy == "LINEAR":
        assert rollout.step_percent is not None and rollout.step_bake_minutes is not None
        options["linear_configuration"] = ecs.TrafficShiftConfig(
            step_percent=rollout.step_percent, step_bake_time=cdk.Duration.minutes(rollout.step_bake_minutes)
        )
    return options


def drop_rolling_parameters(ecs_service: ecs.Ec2Service) -> None:
    """For a traffic-shifting rollout. maximumPercent and minimumHealthyPercent are rolling-update parameters
    (ECS API, DeploymentConfiguration): blue/green, linear and canary scale green to the full count instead. CDK
    renders both whatever the strategy (its defaults 200 and 50 when unset), so they are removed."""
    resource = ecs_service.node.default_child
    assert isinstance(resource, ecs.CfnService)
    resource.add_property_deletion_override("DeploymentConfiguration.MaximumPercent")
    resource.add_property_deletion_override("DeploymentConfiguration.MinimumHealthyPercent")
    cdk.Annotations.of(ecs_service).acknowledge_warning(
        "@aws-cdk/aws-ecs:shouldUseCircuitBreaker",
        "the circuit breaker applies to rolling updates only (ECS API, DeploymentCircuitBreaker); this "
        "blue/green-family deployment rolls back on the models' SLO alarms (deployment alarms)",
    )


def roll_back_on_alarms(
    context: ServiceContext, ecs_service: ecs.Ec2Service, alarms: Mapping[str, cw.CfnAlarm]
) -> tuple[cw.CfnAlarm, ...]:
    """ECS watches these during every deployment (and a blue/green-family bake time) and rolls back when one
    fires (deployment-alarm-failure): each model's SLO alarms, the ones its dashboard row shows. With a
    traffic-shifting rollout they read both target groups, so a canary's errors count. The 5xx alarm leaves
    out admission's 503s and the shedding alarm is not one of these: a traffic spike during a deploy is short
    capacity, not a broken release. `alarms`: observability's, by key. Returns the deployment alarms."""
    keys = [
        (f"{s.name}/" if context.packed else "") + alarm_id
        for s in context.served
        for alarm_id in ("LatencyAlarm", "ErrorRateAlarm")
    ]
    deployment_alarms = tuple(alarms[key] for key in keys)
    # Set on the CfnService, not through Ec2Service.enable_deployment_alarms: that adds an info "Deployment alarm
    # (...) may cause a circular dependency error when this stack deploys" for every alarm name that is a token
    # (BaseService.enableDeploymentAlarms in https://github.com/aws/aws-cdk/blob/v2.275.0/packages/aws-cdk-lib/
    # aws-ecs/lib/base/base-service.ts), one per alarm and environment on every synth, though CDK cannot tell a
    # cycle from a plain reference there (https://github.com/aws/aws-cdk/blob/v2.275.0/packages/aws-cdk-lib/
    # aws-ecs/README.md#troubleshooting-circular-dependencies). The cycle it means is an alarm on the service's
    # own metric (ServiceName: GetAtt Service.Name) that the service names back. These read only the load
    # balancer's target-group metrics, resources the service itself depends on, and the app's EMF Rejected (its
    # dimensions literals), so nothing in them leads back to the service
    # (tests/constructs/test_neuron_deployment_alarms.py holds that on every template), and their
    # names stay CloudFormation's: no physical names, no replacement. The info carries no acknowledgement id
    # (addInfo, not addInfoV2), so Annotations.acknowledge_info cannot silence it.
    resource = ecs_service.node.default_child
    assert isinstance(resource, ecs.CfnService)
    resource.add_property_override(
        "DeploymentConfiguration.Alarms",
        {  # ECS API, DeploymentAlarms
            "AlarmNames": [alarm.ref for alarm in deployment_alarms],
            "Enable": True,
            "Rollback": True,
        },
    )
    return deployment_alarms
