"""A SageMaker real-time endpoint running NVIDIA Triton: model, endpoint config, endpoint with deployment
guardrails, autoscaling from the capacity plan, alarms and a dashboard.

The model repository is baked into the serving image (built from container/triton/ at `cdk deploy`),
not shipped as a model.tar.gz: the repository is produced by an ONNX export that needs torch and the
Hugging Face checkpoint, which synth must never run (offline, deterministic, no docker, no torch), so
there is no model.tar.gz to upload at synth time; a Docker image asset defers the export to the build
that `cdk deploy` runs anyway, and one immutable image tag then carries code and weights together, so a
rollback restores both. With no ModelDataUrl there is nothing for SageMaker to download, and the
container needs no network at all: the Model runs with network isolation (logs, metrics and data
capture are written by SageMaker, not by the container).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs import checkov, nag
from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs import sagemaker_hosting as hosting
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.sagemaker_hosting import (  # noqa: F401 - re-exported: their home before they were shared
    ENDPOINT_NAME_MAX,
    GPU_SATURATION_PERCENT,
    INSTANCE_METRICS_NAMESPACE,
    METRICS_NAMESPACE,
    VARIANT,
    endpoint_name_for,
)
from inferstack.constructs.scaling_handover import ScalingHandover
from inferstack.schema import instances
from inferstack.schema.off_hours import OffHours
from inferstack.schema.triton_sagemaker import TritonDeployment, TritonSageMakerModel
from inferstack.triton import startup as triton_startup


class TritonEndpoint(Construct):
    """One model on a SageMaker real-time endpoint running NVIDIA Triton: the Model, its endpoint config and the
    endpoint with deployment guardrails, autoscaling from the capacity plan, alarms and a dashboard.

    Args:
        scope: The construct to create the endpoint in.
        construct_id: The endpoint's id, which its resources' logical ids start from.
        model: The model file's settings: its serving container, deployment guardrails, scaling cooldowns,
            alarms and data capture. Required.
        plan: This model's capacity plan in this environment (inferstack.capacity.planning): the instance type,
            the instance count range and the invocations-per-instance target; it must be `model`'s. Required.
        off_hours: The environment's off-hours windows for this model: each schedules a smaller instance range,
            and the deployment guardrails are sized for the smallest fleet any window allows. Required (may be
            empty).
        image_uri: The serving image (built from container/triton/) the SageMaker Model runs. Required.
        image_repository: The ECR repository holding `image_uri`: the execution role may pull from it. Required.
        vpc: The VPC the endpoint's instances attach to (no ingress, HTTPS egress only). Required.
        subnets: The subnets of `vpc` the instances attach to. Required.
        key: The KMS key of the instances' volumes (on instance types without NVMe instance storage) and of the
            data capture bucket. Required.
        alarm_topic_arn: The SNS topic the endpoint's alarms notify. Required.
        removal_policy: What deleting the stack does to the data capture buckets. Required.
        log_group: Where the functions that run at deploy time log: the scaling handover's, and with off-hours
            windows the one that reads the live instance range. Required.
        vpc_owner_account: The account that owns `vpc` when it is shared with this one (VPC sharing).
            Default: this stack's account.

    Attributes:
        endpoint_name: The endpoint's name, from the stack's.
        role: The SageMaker execution role.
        security_group: The instances' security group (no ingress).
        model: The SageMaker Model (network isolation, in the VPC).
        endpoint_config: The endpoint config with its one variant.
        endpoint: The endpoint.
        deployment: The guardrails as applied to the smallest fleet a deploy can meet.
        scalable_target: The variant's Application Auto Scaling target.
        scaling_handover: What lets an instance-type change deploy while the variant is autoscaled.
        alarms: Alarm key -> alarm (an L1: its name is its `ref`, its ARN `attr_arn`).
        rollback_alarms: The alarms the deployment guardrails roll back on.
        dashboard: The dashboard (an L1).
        data_capture_bucket: The data capture bucket, or None without data capture."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: TritonSageMakerModel,
        plan: CapacityPlan,
        off_hours: Sequence[OffHours],
        image_uri: str,
        image_repository: ecr.IRepository,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        key: kms.IKey,
        alarm_topic_arn: str,
        removal_policy: cdk.RemovalPolicy,
        log_group: logs.ILogGroup,
        vpc_owner_account: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if plan.model != model.name:
            raise ValueError(f"capacity plan is for {plan.model!r}, not {model.name!r}")
        stack = cdk.Stack.of(self)
        self.endpoint_name = endpoint_name_for(stack.stack_name)
        spec = instances.get(plan.instance_type)

        self.security_group = hosting.no_ingress_security_group(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"{model.name} SageMaker endpoint: no ingress, HTTPS egress only",
        )

        self.data_capture_bucket = self._data_capture_bucket(key, removal_policy) if model.data_capture else None
        self.role, policy = self._execution_role(image_repository, vpc, vpc_owner_account, key)

        subnet_ids = hosting.subnet_ids(vpc, subnets)
        self.model = hosting.triton_model(
            self,
            role=self.role,
            image_uri=image_uri,
            model=model,
            security_group_id=self.security_group.security_group_id,
            subnet_ids=subnet_ids,
        )
        # SageMaker checks the role's permissions when it creates the Model: wait for the policy (IAM race).
        self.model.node.add_dependency(policy)

        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "EndpointConfig",
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT,
                    model_name=self.model.attr_model_name,
                    instance_type=plan.instance_type,
                    initial_instance_count=plan.min_capacity,
                    initial_variant_weight=1.0,
                    # From what the container loads: TensorRT engine builds, instances, warm-up.
                    container_startup_health_check_timeout_in_seconds=(
                        triton_startup.health_check_timeout_seconds(model)
                    ),
                    model_data_download_timeout_in_seconds=model.serving.model_data_download_timeout_seconds,
                    inference_ami_version=model.serving.inference_ami_version,
                )
            ],
            # SageMaker rejects KmsKeyId for instance types with NVMe instance storage (g4dn, g5): their
            # local volumes are encrypted by the instance's hardware module.
            kms_key_id=None if spec.instance_storage else key.key_arn,
            data_capture_config=self._data_capture_config(model, key),
        )

        self.alarms = self._alarms(plan, spec, alarm_topic_arn)
        self.rollback_alarms = (self.alarms["ModelLatencyP99"], self.alarms["Invocation5XXErrors"])
        # Guardrails read them with the execution role; the endpoint waits for the policy through the Model.
        policy.add_statements(hosting.rollback_alarms_statement(self.rollback_alarms))

        # With RetainAllVariantProperties a deploy meets the autoscaled fleet, which can be as small as the
        # planned minimum or an off-hours minimum: size the guardrails for that fleet.
        smallest_fleet = min([plan.min_capacity, *(window.min for window in off_hours)])
        self.deployment = model.deployment.for_fleet(smallest_fleet)
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            # A deploy keeps the autoscaled instance count (and weight) instead of resetting the fleet to
            # InitialInstanceCount; data capture is excluded so its config changes do apply.
            retain_all_variant_properties=True,
            exclude_retained_variant_properties=[
                sagemaker.CfnEndpoint.VariantPropertyProperty(variant_property_type="DataCaptureConfig")
            ],
            deployment_config=self._deployment_config(self.deployment),
        )

        self.scalable_target = self._autoscaling(model, plan, off_hours, log_group)
        self.dashboard = self._dashboard(model.name)

    # ------------------------------------------------------------------ IAM

    def _execution_role(
        self, repository: ecr.IRepository, vpc: ec2.IVpc, vpc_owner_account: str | None, key: kms.IKey
    ) -> tuple[iam.Role, iam.Policy]:
        stack = cdk.Stack.of(self)
        role = hosting.execution_role(self, "ExecutionRole", "SageMaker execution role of one Triton endpoint")
        log_group_arn = hosting.log_group_arn(stack, f"/aws/sagemaker/Endpoints/{self.endpoint_name}")
        statements = hosting.execution_statements(
            repository, log_group_arn, hosting.vpc_arn(stack, vpc, vpc_owner_account)
        )
        if self.data_capture_bucket is not None:
            statements += [
                iam.PolicyStatement(
                    sid="DataCaptureWrite",
                    actions=["s3:PutObject"],
                    resources=[self.data_capture_bucket.arn_for_objects(f"{self.endpoint_name}/*")],
                ),
                iam.PolicyStatement(
                    sid="DataCaptureEncrypt", actions=["kms:GenerateDataKey", "kms:Encrypt"], resources=[key.key_arn]
                ),
            ]
        policy = iam.Policy(self, "ExecutionPolicy", roles=[role], statements=statements)
        acknowledgements = hosting.wildcard_acknowledgements(log_group_arn, "its endpoint log group")
        if self.data_capture_bucket is not None:
            bucket_id = stack.resolve(
                stack.get_logical_id(cast(s3.CfnBucket, self.data_capture_bucket.node.default_child))
            )
            acknowledgements.append(
                (
                    f"Resource::<{bucket_id}.Arn>/{self.endpoint_name}/*",
                    "data capture writes one object per sampled request under this "
                    "endpoint's prefix; names are chosen by SageMaker at runtime",
                )
            )
        hosting.acknowledge(policy, acknowledgements)
        return role, policy

    # ------------------------------------------------------------------ data capture

    def _data_capture_bucket(self, key: kms.IKey, removal_policy: cdk.RemovalPolicy) -> s3.Bucket:
        access_logs = s3.Bucket(
            self,
            "DataCaptureAccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # log delivery needs SSE-S3
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=removal_policy,
        )
        nag.acknowledge(
            access_logs,
            "S1",
            "this bucket receives the data-capture bucket's server access logs; logging it to itself would loop",
        )
        checkov.skip(
            access_logs,
            "CKV_AWS_18",
            "this bucket receives the data-capture bucket's server access logs; logging it to itself would loop",
        )
        return s3.Bucket(
            self,
            "DataCapture",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="data-capture/",
            removal_policy=removal_policy,
        )

    def _data_capture_config(self, model: TritonSageMakerModel, key: kms.IKey):
        capture = model.data_capture
        if capture is None or self.data_capture_bucket is None:
            return None
        return sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=capture.sampling_percentage,
            destination_s3_uri=self.data_capture_bucket.s3_url_for_object(self.endpoint_name),
            kms_key_id=key.key_arn,
            capture_options=[
                sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode=mode.capitalize())
                for mode in capture.capture
            ],
            capture_content_type_header=sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                json_content_types=["application/json"]
            ),
        )

    # ------------------------------------------------------------------ deployment guardrails

    def _deployment_config(self, deployment: TritonDeployment) -> sagemaker.CfnEndpoint.DeploymentConfigProperty:
        rollback = sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
            alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=alarm.ref) for alarm in self.rollback_alarms]
        )

        def percent(value: int) -> sagemaker.CfnEndpoint.CapacitySizeProperty:
            return sagemaker.CfnEndpoint.CapacitySizeProperty(type="CAPACITY_PERCENT", value=value)

        if deployment.strategy == "rolling":
            assert deployment.size_percent is not None  # the schema requires it for rolling
            return sagemaker.CfnEndpoint.DeploymentConfigProperty(
                auto_rollback_configuration=rollback,
                rolling_update_policy=sagemaker.CfnEndpoint.RollingUpdatePolicyProperty(
                    maximum_batch_size=percent(deployment.size_percent),
                    wait_interval_in_seconds=deployment.wait_interval_seconds,
                    maximum_execution_timeout_in_seconds=deployment.maximum_execution_timeout_seconds,
                    rollback_maximum_batch_size=(
                        percent(deployment.rollback_size_percent) if deployment.rollback_size_percent else None
                    ),
                ),
            )
        size = deployment.size_percent  # the schema requires it for canary and linear, forbids it for all-at-once
        routing = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=deployment.strategy.upper().replace("-", "_"),
            wait_interval_in_seconds=deployment.wait_interval_seconds,
            canary_size=percent(size) if deployment.strategy == "canary" and size is not None else None,
            linear_step_size=percent(size) if deployment.strategy == "linear" and size is not None else None,
        )
        return sagemaker.CfnEndpoint.DeploymentConfigProperty(
            auto_rollback_configuration=rollback,
            blue_green_update_policy=sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
                traffic_routing_configuration=routing,
                termination_wait_in_seconds=deployment.termination_wait_seconds,
                maximum_execution_timeout_in_seconds=deployment.maximum_execution_timeout_seconds,
            ),
        )

    # ------------------------------------------------------------------ autoscaling

    def _autoscaling(
        self, model: TritonSageMakerModel, plan: CapacityPlan, off_hours: Sequence[OffHours], log_group: logs.ILogGroup
    ) -> appscaling.ScalableTarget:
        linked_role = hosting.scaling_role(self)
        target = appscaling.ScalableTarget(
            self,
            "ScalableTarget",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{self.endpoint_name}/variant/{VARIANT}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=plan.min_capacity,
            max_capacity=plan.max_capacity,
            role=linked_role,
        )
        # The target names the endpoint by its (synth-time) name, so the order must be explicit: register
        # after the endpoint exists, deregister before it is deleted.
        target.node.add_dependency(self.endpoint)
        target.scale_to_track_metric(
            "InvocationsPerInstance",
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            target_value=plan.target_per_instance_per_minute,
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
                    (window.min, window.max),
                    (plan.min_capacity, plan.max_capacity),
                )
                for window in off_hours
            ],
        )
        capacity_range: tuple[object, object] = (plan.min_capacity, plan.max_capacity)
        if off_hours:  # a deploy inside a window keeps the window's range (inferstack.constructs.live_values)
            self.live_values = LiveValues(self, "LiveValues", log_group=log_group)
            reader = self.live_values.window_range(
                "InstanceRange",
                target=target,
                planned=(plan.min_capacity, plan.max_capacity),
                windows=[(window.min, window.max) for window in off_hours],
            )
            if reader is not None:
                capacity_range = (reader.get_att("Min"), reader.get_att("Max"))
        # An instance-type change must not meet a registered target (inferstack.constructs.scaling_handover).
        self.scaling_handover = ScalingHandover(
            self,
            "ScalingHandover",
            endpoint=self.endpoint,
            endpoint_name=self.endpoint_name,
            variant_name=VARIANT,
            instance_type=plan.instance_type,
            target=target,
            capacity_range=capacity_range,
            log_group=log_group,
        )
        return target

    # ------------------------------------------------------------------ alarms and dashboard

    # Alarms and dashboard are L1 resources built from plain values (inferstack.constructs.cloudwatch_l1):
    # the L2 API costs a jsii round trip per metric, widget and call, which dominates synth at fleet scale.
    # The template is the one the L2 wrote (same logical ids, properties and dashboard JSON).

    def _metric(self, name: str, statistic: str, *, instance: bool = False) -> cwl1.Metric:
        return cwl1.Metric(
            INSTANCE_METRICS_NAMESPACE if instance else METRICS_NAMESPACE,
            name,
            {"EndpointName": self.endpoint_name, "VariantName": VARIANT},
            statistic,
        )

    def _alarms(self, plan: CapacityPlan, spec: instances.InstanceSpec, topic_arn: str) -> dict[str, cw.CfnAlarm]:
        # SageMaker reports GPU utilization 0-100 per GPU, summed over the instance's GPUs.
        gpu_ceiling = GPU_SATURATION_PERCENT * max(spec.gpus, 1)
        definitions = hosting.invocation_alarm_definitions(self._metric, plan.slo_p99_ms)
        definitions |= {
            "GPUUtilization": (
                self._metric("GPUUtilization", "Average", instance=True),
                gpu_ceiling,
                15,
                15,
                "GPUs saturated for 15 minutes: autoscaling is at max or too slow",
            ),
            "GPUMemoryUtilization": (
                self._metric("GPUMemoryUtilization", "Maximum", instance=True),
                gpu_ceiling,
                5,
                5,
                "GPU memory nearly full",
            ),
        }
        return hosting.alarms(self, definitions, described=self.endpoint_name, topic_arn=topic_arn)

    def _dashboard(self, model_name: str) -> cw.CfnDashboard:
        region = cdk.Aws.REGION

        def graph(title: str, *metrics: cwl1.Metric, right: Sequence[cwl1.Metric] = ()) -> cwl1.Widget:
            return cwl1.graph(title, metrics, right=right, region=region, width=12)

        def alarm_graph(title: str, alarm: str) -> cwl1.Widget:
            return cwl1.alarm_graph(title, self.alarms[alarm].attr_arn, region=region, width=12)

        rows = [
            [cwl1.text(f"# {model_name}: SageMaker endpoint `{self.endpoint_name}`", width=24, height=1)],
            [
                graph(
                    "Invocations",
                    self._metric("Invocations", "Sum"),
                    right=[self._metric("InvocationsPerInstance", "Sum")],
                ),
                alarm_graph("ModelLatency p99 (us) vs SLO", "ModelLatencyP99"),
            ],
            [
                alarm_graph("OverheadLatency p99 (us)", "OverheadLatencyP99"),
                graph("Errors", self._metric("Invocation4XXErrors", "Sum"), self._metric("Invocation5XXErrors", "Sum")),
            ],
            [
                graph(
                    "GPU",
                    self._metric("GPUUtilization", "Average", instance=True),
                    self._metric("GPUMemoryUtilization", "Maximum", instance=True),
                ),
                graph(
                    "CPU and memory",
                    self._metric("CPUUtilization", "Average", instance=True),
                    self._metric("MemoryUtilization", "Maximum", instance=True),
                ),
            ],
        ]
        return cwl1.dashboard(self, "Dashboard", rows, period_override="auto")
