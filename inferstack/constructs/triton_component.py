"""One Triton model on a fleet's shared SageMaker endpoint (inferstack.constructs.shared_endpoint): its
Model (the same image and Triton start-up Environment as a dedicated TritonEndpoint), an inference
component holding its copies, their scaling (target tracking per copy; scale-out from zero by SageMaker's
documented step policy on NoCapacityInvocationFailures), a rolling update rolled back on the model's own
alarms, its alarms and dashboard, and what the shared endpoint's role needs for this component.

Copy counts, scaling targets and schedules come from the fleet plan (inferstack.capacity.packing) only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from inferstack.capacity.packing import ComponentFleetPlan
from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs import nag
from inferstack.constructs import sagemaker_hosting as hosting
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.shared_endpoint import SharedEndpoint
from inferstack.schema.deployment import MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT
from inferstack.schema.triton_sagemaker import TritonDeployment, TritonSageMakerModel
from inferstack.triton import startup as triton_startup

COMPONENT_METRICS_NAMESPACE = "/aws/sagemaker/InferenceComponents"  # per copy, 0-100 of its reservation
SCALABLE_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
NO_CAPACITY_METRIC = "NoCapacityInvocationFailures"
# InferenceComponentRollingUpdatePolicy.MaximumBatchSize "must be between 5% to 50% of the copy count of the
# inference component" (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentRollingUpdatePolicy.html).
ROLLING_BATCH_PERCENT = (5, 50)
MAXIMUM_EXECUTION_TIMEOUT_SECONDS = 28_800  # the same page: 600 to 28800
PROVISION_MARGIN_SECONDS = 600  # room a raised timeout leaves beyond the bakes to place each batch's copies
SCALE_FROM_ZERO_COOLDOWN_SECONDS = 60  # as the documented step policy


@dataclass(frozen=True)
class ComponentRollout:
    """How a deploy replaces the component's copies: a rolling update in batches of `batch_percent` of its
    copies, each baked `wait_interval_seconds` against the rollback alarms."""

    batch_percent: int
    rollback_batch_percent: int | None  # None: SageMaker's default, the old copies back all at once
    wait_interval_seconds: int
    maximum_execution_timeout_seconds: int

    @property
    def steps(self) -> int:
        return math.ceil(100 / self.batch_percent)


def rollout_for(deployment: TritonDeployment, smallest_copies: int) -> ComponentRollout | None:
    """The model's `deployment:` as a rolling update of its copies, for a component that may hold only
    `smallest_copies` copies at deploy time; None where no batch can be a proper part of the copies.

    An inference component is updated by a rolling update or not at all under guardrails: its
    DeploymentConfig has no blue/green traffic shifting. Without one (None), SageMaker replaces the copies
    the way it did before rolling updates existed, blue/green all at once ("Traditionally, SageMaker AI
    inference has supported the blue/green deployment pattern for updating inference components",
    https://aws.amazon.com/blogs/machine-learning/enhance-deployment-guardrails-with-inference-component-rolling-updates-for-amazon-sagemaker-ai-inference/).
    - fewer than MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT copies (one, or zero for a model that scales to zero):
      a batch of one copy would be all of them, above SageMaker's 50%: None, as TritonDeployment.for_fleet
      replaces a one-instance endpoint all at once;
    - rolling: its batch and rollback batch as configured (the schema holds them to 5-50%);
    - linear: the step is the batch (10-50%);
    - canary: one batch of the canary's size cannot be followed by "the rest at once", so the batches are
      the canary's size (at least 5%), grown until every batch bakes within the timeout;
    - all-at-once: the largest batch SageMaker allows (50%), two bakes; the timeout is raised if two bakes
      would not fit in it."""
    if smallest_copies < MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT:
        return None
    low, high = ROLLING_BATCH_PERCENT
    wait, timeout = deployment.wait_interval_seconds, deployment.maximum_execution_timeout_seconds
    if deployment.strategy in ("rolling", "linear"):
        assert deployment.size_percent is not None  # the schema requires it for both
        batch = deployment.size_percent
    elif deployment.strategy == "canary":
        assert deployment.size_percent is not None
        # 50% always fits: a canary's two bakes and termination wait already fit in its timeout.
        batch = next(
            p for p in range(max(deployment.size_percent, low), high + 1) if math.ceil(100 / p) * wait < timeout
        )
    else:
        batch = high
    bakes = math.ceil(100 / batch) * wait
    if bakes >= timeout:
        timeout = min(MAXIMUM_EXECUTION_TIMEOUT_SECONDS, bakes + PROVISION_MARGIN_SECONDS)
    return ComponentRollout(
        batch_percent=batch,
        rollback_batch_percent=deployment.rollback_size_percent if deployment.strategy == "rolling" else None,
        wait_interval_seconds=wait,
        maximum_execution_timeout_seconds=timeout,
    )


class TritonComponent(Construct):
    """Exposes `component_name`, `endpoint_name` (the shared endpoint's), `role` and `model` (the Model's
    own execution role and Model), `access_policy` (on the shared endpoint's role), `component`, `rollout`
    (None: replaced all at once), `scalable_target`, `scale_from_zero` (the step policy, where the fleet
    scales to zero), `alarms` (by name), `rollback_alarms` and `dashboard`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: TritonSageMakerModel,
        plan: ComponentFleetPlan,
        shared: SharedEndpoint,
        image_uri: str,
        image_repository: ecr.IRepository,
        vpc: ec2.IVpc,
        alarm_topic_arn: str,
        log_group: logs.ILogGroup,
        vpc_owner_account: str | None = None,
    ) -> None:
        """`shared`: the fleet's endpoint (in the fleet's stack); `plan`: the fleet's plan, which holds this
        model; `log_group`: where the function that reads the live copy count at deploy time logs.

        Args:
            vpc_owner_account: The account that owns `vpc` when it is shared with this one (VPC sharing).
                Default: this stack's account.
        """
        super().__init__(scope, construct_id)
        if model.name not in {s.model for s in plan.shares}:
            raise ValueError(f"fleet plan {plan.fleet!r} does not hold model {model.name!r}")
        stack = cdk.Stack.of(self)
        share = plan.share(model.name)
        self.component_name = hosting.endpoint_name_for(stack.stack_name)
        self.endpoint_name = shared.endpoint_name
        vpc_arn = hosting.vpc_arn(stack, vpc, vpc_owner_account)
        # SageMaker writes each component's container logs to a log group of its own.
        log_group_arn = hosting.log_group_arn(stack, f"/aws/sagemaker/InferenceComponents/{self.component_name}")

        self.role = hosting.execution_role(
            self, "ExecutionRole", "SageMaker execution role of one Triton model on a shared endpoint"
        )
        policy = iam.Policy(
            self,
            "ExecutionPolicy",
            roles=[self.role],
            statements=hosting.execution_statements(image_repository, log_group_arn, vpc_arn, log_sid="ComponentLogs"),
        )
        hosting.acknowledge(policy, hosting.wildcard_acknowledgements(log_group_arn, "its component log group"))
        # The shared endpoint's network: its copies run on that endpoint's instances.
        self.model = hosting.triton_model(
            self,
            role=self.role,
            image_uri=image_uri,
            model=model,
            security_group_id=shared.security_group.security_group_id,
            subnet_ids=shared.subnet_ids,
        )
        # SageMaker checks the role's permissions when it creates the Model: wait for the policy (IAM race).
        self.model.node.add_dependency(policy)

        self.alarms = self._alarms(plan, model, alarm_topic_arn)
        self.rollback_alarms = (self.alarms["ModelLatencyP99"], self.alarms["Invocation5XXErrors"])
        deployment = model.deployment_for(plan.environment) or model.deployment  # this environment's, if it has one
        self.rollout = rollout_for(deployment, plan.smallest_copy_count(model.name))

        # The shared endpoint acts with its own role for every component: grant it this component's image, its
        # log group and (guardrails) its rollback alarms, from this stack, so the grant comes and goes with it.
        access = [hosting.pull_statement(image_repository), hosting.log_statement("ComponentLogs", log_group_arn)]
        if self.rollout is not None:
            access.append(hosting.rollback_alarms_statement(self.rollback_alarms))
        # Every member attaches its grant to the same role: an inline policy's name is unique per role (the CDK's
        # default, the logical id, is the same in every member's stack, and a second one would replace the first).
        self.access_policy = iam.Policy(
            self,
            "SharedEndpointAccess",
            roles=[shared.role],
            statements=access,
            policy_name=f"{self.component_name}-component",
        )
        nag.acknowledge(
            self.access_policy,
            f"IAM5[Resource::{log_group_arn}:log-stream:*]",
            "SageMaker names the log streams of this component's log group per instance at runtime",
        )

        self.component = sagemaker.CfnInferenceComponent(
            self,
            "Component",
            inference_component_name=self.component_name,
            # A reference, not the synth-time name: the component is created after its endpoint and deleted
            # before it because of this, not because of another import from the fleet's stack.
            endpoint_name=shared.endpoint.attr_endpoint_name,
            variant_name=shared.variant_name,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=self.model.attr_model_name,
                compute_resource_requirements=(
                    sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                        number_of_accelerator_devices_required=share.accelerators,
                        number_of_cpu_cores_required=share.cpu_cores,
                        min_memory_required_in_mb=share.memory_mib,
                    )
                ),
                startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                    # From what the container loads: TensorRT engine builds, instances, warm-up.
                    container_startup_health_check_timeout_in_seconds=(
                        triton_startup.health_check_timeout_seconds(model)
                    ),
                    model_data_download_timeout_in_seconds=model.serving.model_data_download_timeout_seconds,
                ),
            ),
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=share.initial_copies
            ),
            deployment_config=self._deployment_config(self.rollout),
        )
        # The endpoint's role pulls this image when the first copy starts: wait for the grant (IAM race).
        self.component.node.add_dependency(self.access_policy)
        # An update sends RuntimeConfig.CopyCount (write-only: CloudFormation never reads it back): write the count
        # autoscaling set, possibly zero, not the planned initial copies.
        self.live_values = LiveValues(self, "LiveValues", log_group=log_group)
        self.live_values.copy_count(
            "Copies", resource=self.component, component_name=self.component_name, planned=share.initial_copies
        )

        self.scalable_target, self.scale_from_zero = self._autoscaling(model, plan)
        self.dashboard = self._dashboard(model.name, plan)

    # ------------------------------------------------------------------ deployment

    def _deployment_config(self, rollout: ComponentRollout | None):
        if rollout is None:
            return None

        def percent(value: int):
            return sagemaker.CfnInferenceComponent.InferenceComponentCapacitySizeProperty(
                type="CAPACITY_PERCENT", value=value
            )

        return sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty(
            rolling_update_policy=sagemaker.CfnInferenceComponent.InferenceComponentRollingUpdatePolicyProperty(
                maximum_batch_size=percent(rollout.batch_percent),
                wait_interval_in_seconds=rollout.wait_interval_seconds,
                maximum_execution_timeout_in_seconds=rollout.maximum_execution_timeout_seconds,
                rollback_maximum_batch_size=(
                    percent(rollout.rollback_batch_percent) if rollout.rollback_batch_percent else None
                ),
            ),
            auto_rollback_configuration=sagemaker.CfnInferenceComponent.AutoRollbackConfigurationProperty(
                alarms=[
                    sagemaker.CfnInferenceComponent.AlarmProperty(alarm_name=alarm.ref)
                    for alarm in self.rollback_alarms
                ]
            ),
        )

    # ------------------------------------------------------------------ autoscaling

    def _autoscaling(
        self, model: TritonSageMakerModel, plan: ComponentFleetPlan
    ) -> tuple[appscaling.ScalableTarget, appscaling.StepScalingAction | None]:
        share = plan.share(model.name)
        target = appscaling.ScalableTarget(
            self,
            "ScalableTarget",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"inference-component/{self.component_name}",
            scalable_dimension=SCALABLE_DIMENSION,
            min_capacity=share.min_copies,
            max_capacity=share.max_copies,
            role=hosting.scaling_role(self),
        )
        # The target names the component by its (synth-time) name, so the order must be explicit: register
        # after the component exists, deregister before it is deleted.
        target.node.add_dependency(self.component)
        target.scale_to_track_metric(
            "InvocationsPerCopy",
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_INVOCATIONS_PER_COPY,
            target_value=plan.target_per_copy_per_minute(model.name),
            scale_out_cooldown=cdk.Duration.seconds(model.scaling.scale_out_cooldown_seconds),
            scale_in_cooldown=cdk.Duration.seconds(model.scaling.scale_in_cooldown_seconds),
        )
        hosting.schedule(
            target,
            [
                hosting.ScheduledCapacity(
                    window.start,
                    window.end,
                    window.time_zone,
                    plan.window_copies(model.name, window),
                    (share.min_copies, share.max_copies),
                )
                for window in plan.windows
            ],
        )
        self.live_values.window_range(
            "CopyRange",
            target=target,
            planned=(share.min_copies, share.max_copies),
            windows=[plan.window_copies(model.name, window) for window in plan.windows],
        )
        if not plan.scales_to_zero:
            return target, None
        # Target tracking cannot leave zero copies (no copy, no invocations per copy): a request that finds
        # none fails, counts in NoCapacityInvocationFailures, and this alarm starts a step policy that adds a
        # copy; managed instance scaling then launches an instance for it
        # (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html: the step
        # policy and the alarm as documented, except that the alarm fires on the first failed request, >= 1,
        # where the page's example waits for a second one in the same minute, > 1).
        step = appscaling.StepScalingAction(
            self,
            "ScaleOutFromZero",
            scaling_target=target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            cooldown=cdk.Duration.seconds(SCALE_FROM_ZERO_COOLDOWN_SECONDS),
        )
        step.add_adjustment(adjustment=1, lower_bound=0)
        self.alarms[NO_CAPACITY_METRIC] = cwl1.alarm(
            self,
            NO_CAPACITY_METRIC,
            metric=self._metric(NO_CAPACITY_METRIC, "Sum"),
            threshold=1,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="notBreaching",
            action_arn=step.scaling_policy_arn,
            notify_ok=False,
            description=f"{self.component_name}: a request found no copy (scaled to zero): add one",
        )
        return target, step

    # ------------------------------------------------------------------ alarms and dashboard

    def _metric(self, name: str, statistic: str, *, per_copy: bool = False) -> cwl1.Metric:
        return cwl1.Metric(
            COMPONENT_METRICS_NAMESPACE if per_copy else hosting.METRICS_NAMESPACE,
            name,
            {"InferenceComponentName": self.component_name},
            statistic,
        )

    def _alarms(self, plan: ComponentFleetPlan, model: TritonSageMakerModel, topic_arn: str) -> dict[str, cw.CfnAlarm]:
        share = plan.share(model.name)
        gpu = hosting.GPU_SATURATION_PERCENT  # the normalized metrics are 0-100 of the copy's reservation
        definitions = hosting.invocation_alarm_definitions(self._metric, share.slo_p99_ms)
        definitions |= {
            "GPUUtilization": (
                self._metric("GPUUtilizationNormalized", "Average", per_copy=True),
                gpu,
                15,
                15,
                "the copies' GPUs saturated for 15 minutes: scaling is at max or too slow",
            ),
            "GPUMemoryUtilization": (
                self._metric("GPUMemoryUtilizationNormalized", "Maximum", per_copy=True),
                gpu,
                5,
                5,
                "a copy's GPU memory nearly full",
            ),
        }
        return hosting.alarms(
            self, definitions, described=f"{self.component_name} on {self.endpoint_name}", topic_arn=topic_arn
        )

    def _dashboard(self, model_name: str, plan: ComponentFleetPlan) -> cw.CfnDashboard:
        region = cdk.Aws.REGION
        share = plan.share(model_name)

        def graph(title: str, *metrics: cwl1.Metric, right: Sequence[cwl1.Metric] = ()) -> cwl1.Widget:
            return cwl1.graph(title, metrics, right=right, region=region, width=12)

        def alarm_graph(title: str, alarm: str) -> cwl1.Widget:
            return cwl1.alarm_graph(title, self.alarms[alarm].attr_arn, region=region, width=12)

        rows = [
            [
                cwl1.text(
                    f"# {model_name}: inference component `{self.component_name}` on the shared endpoint "
                    f"`{self.endpoint_name}` (fleet {plan.fleet}, {share.min_copies} to {share.max_copies} copies)",
                    width=24,
                    height=1,
                )
            ],
            [
                graph(
                    "Invocations", self._metric("Invocations", "Sum"), right=[self._metric("InvocationsPerCopy", "Sum")]
                ),
                alarm_graph("ModelLatency p99 (us) vs SLO", "ModelLatencyP99"),
            ],
            [
                alarm_graph("OverheadLatency p99 (us)", "OverheadLatencyP99"),
                graph("Errors", self._metric("Invocation4XXErrors", "Sum"), self._metric("Invocation5XXErrors", "Sum")),
            ],
            [
                graph(
                    "GPU (% of the reservation)",
                    self._metric("GPUUtilizationNormalized", "Average", per_copy=True),
                    self._metric("GPUMemoryUtilizationNormalized", "Maximum", per_copy=True),
                ),
                graph(
                    "CPU and memory (% of the reservation)",
                    self._metric("CPUUtilizationNormalized", "Average", per_copy=True),
                    self._metric("MemoryUtilizationNormalized", "Maximum", per_copy=True),
                ),
            ],
        ]
        if NO_CAPACITY_METRIC in self.alarms:
            rows.append([alarm_graph("Requests that found no copy (scale-out from zero)", NO_CAPACITY_METRIC)])
        return cwl1.dashboard(self, "Dashboard", rows, period_override="auto")
