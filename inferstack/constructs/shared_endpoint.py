"""One SageMaker endpoint that several Triton models share as inference components (a fleet of kind
sagemaker-inference-components): the endpoint config, whose variant names no model and holds only the
instances (managed instance scaling, down to zero instances where the fleet plan allows), the endpoint,
its execution role, and a fleet alarm and dashboard.

Each model's inference component, scaling, alarms and dashboard live in the model's own stack
(inferstack.constructs.triton_component); that stack grants this endpoint's role what its component needs
(its image, its log group, its rollback alarms), so adding or removing a model never edits this stack.
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html: an endpoint
can scale to and from zero instances only if it hosts inference components, with the variant's
ManagedInstanceScaling.MinInstanceCount at 0."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from inferstack.capacity.packing import ComponentFleetPlan
from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs import sagemaker_hosting as hosting
from inferstack.schema import instances

# Instances are counted from the per-instance utilization samples of one minute: each in-service instance
# reports CPUUtilizationNormalized once a minute (/aws/sagemaker/Endpoints, for endpoints that host
# inference components; https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html).
INSTANCE_COUNT_METRIC = "CPUUtilizationNormalized"
AT_MAXIMUM_MINUTES = 15


class SharedEndpoint(Construct):
    """Exposes `endpoint_name`, `variant_name`, `plan`, `role` (the endpoint config's execution role, which
    members extend), `policy`, `security_group`, `subnet_ids`, `endpoint_config`, `endpoint`, `alarms` and
    `dashboard`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        plan: ComponentFleetPlan,
        inference_ami_version: str | None,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        key: kms.IKey,
        alarm_topic_arn: str,
        vpc_owner_account: str | None = None,
    ) -> None:
        """`inference_ami_version`: the AMI every member's container needs (they must agree: one variant
        runs them all).

        Args:
            vpc_owner_account: The account that owns `vpc` when it is shared with this one (VPC sharing).
                Default: this stack's account.
        """
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.plan = plan
        self.endpoint_name = hosting.endpoint_name_for(stack.stack_name)
        self.variant_name = hosting.VARIANT
        spec = instances.get(plan.instance_type)

        self.security_group = hosting.no_ingress_security_group(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"{plan.fleet} shared SageMaker endpoint: no ingress, HTTPS egress only",
        )
        self.subnet_ids = hosting.subnet_ids(vpc, subnets)

        # What the endpoint's own instances need. Each member adds its image, its component's log group and
        # its rollback alarms to this role from its own stack (TritonComponent).
        self.role = hosting.execution_role(
            self, "ExecutionRole", f"SageMaker execution role of the shared endpoint of fleet {plan.fleet}"
        )
        log_group_arn = hosting.log_group_arn(stack, f"/aws/sagemaker/Endpoints/{self.endpoint_name}")
        self.policy = iam.Policy(
            self,
            "ExecutionPolicy",
            roles=[self.role],
            statements=[
                hosting.log_statement("EndpointLogs", log_group_arn),
                *hosting.host_statements(hosting.vpc_arn(stack, vpc, vpc_owner_account)),
            ],
        )
        hosting.acknowledge(self.policy, hosting.wildcard_acknowledgements(log_group_arn, "the endpoint log group"))

        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "EndpointConfig",
            # Required when the variant names no model (inference components): SageMaker acts with it.
            execution_role_arn=self.role.role_arn,
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=self.variant_name,
                    instance_type=plan.instance_type,
                    initial_instance_count=plan.initial_instances,
                    managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                        status="ENABLED", min_instance_count=plan.min_capacity, max_instance_count=plan.max_capacity
                    ),
                    # Each request goes to the copy with the fewest requests in flight, not a random one.
                    routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(
                        routing_strategy="LEAST_OUTSTANDING_REQUESTS"
                    ),
                    inference_ami_version=inference_ami_version,
                )
            ],
            vpc_config=sagemaker.CfnEndpointConfig.VpcConfigProperty(
                security_group_ids=[self.security_group.security_group_id], subnets=self.subnet_ids
            ),
            enable_network_isolation=True,
            # SageMaker rejects KmsKeyId for instance types with NVMe instance storage (g4dn, g5): their
            # local volumes are encrypted by the instance's hardware module.
            kms_key_id=None if spec.instance_storage else key.key_arn,
        )
        # The endpoint launches its instances and their network interfaces with the role: wait for its policy.
        self.endpoint_config.node.add_dependency(self.policy)
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            # A new endpoint config keeps the instance count managed instance scaling reached (possibly zero)
            # instead of restarting at InitialInstanceCount; the config's scaling range still applies.
            retain_all_variant_properties=True,
        )

        self.alarms = self._alarms(alarm_topic_arn)
        self.dashboard = self._dashboard()

    # ------------------------------------------------------------------ alarms and dashboard

    def _metric(self, name: str, statistic: str, *, instance: bool = True) -> cwl1.Metric:
        return cwl1.Metric(
            hosting.INSTANCE_METRICS_NAMESPACE if instance else hosting.METRICS_NAMESPACE,
            name,
            {"EndpointName": self.endpoint_name, "VariantName": self.variant_name},
            statistic,
        )

    def _alarms(self, topic_arn: str) -> dict[str, cw.CfnAlarm]:
        maximum = self.plan.max_capacity
        return {
            "InstancesAtMaximum": cwl1.alarm(
                self,
                "InstancesAtMaximum",
                metric=self._metric(INSTANCE_COUNT_METRIC, "SampleCount"),
                threshold=maximum,
                evaluation_periods=AT_MAXIMUM_MINUTES,
                datapoints_to_alarm=AT_MAXIMUM_MINUTES,
                comparison_operator="GreaterThanOrEqualToThreshold",
                treat_missing_data="notBreaching",
                description=(
                    f"{self.endpoint_name} (fleet {self.plan.fleet}): {maximum} instances (the fleet's maximum) "
                    f"for {AT_MAXIMUM_MINUTES} minutes: components cannot add copies; raise capacity.max or "
                    f"move a model out"
                ),
                action_arn=topic_arn,
            )
        }

    def _dashboard(self) -> cw.CfnDashboard:
        region = cdk.Aws.REGION
        plan = self.plan

        def graph(title: str, *metrics: cwl1.Metric) -> cwl1.Widget:
            return cwl1.graph(title, metrics, region=region, width=12)

        rows = [
            [
                cwl1.text(
                    f"# fleet {plan.fleet}: shared SageMaker endpoint `{self.endpoint_name}` "
                    f"({plan.instance_type}, {plan.min_capacity} to {plan.max_capacity} instances)",
                    width=24,
                    height=1,
                )
            ],
            [
                cwl1.alarm_graph(
                    "Instances (utilization samples per minute) vs maximum",
                    self.alarms["InstancesAtMaximum"].attr_arn,
                    region=region,
                    width=12,
                ),
                graph(
                    "Reserved by components (%)",
                    self._metric("GPUReservation", "Average"),
                    self._metric("CPUReservation", "Average"),
                    self._metric("MemoryReservation", "Average"),
                ),
            ],
            [
                graph(
                    "Utilization (%)",
                    self._metric("GPUUtilizationNormalized", "Average"),
                    self._metric("GPUMemoryUtilizationNormalized", "Maximum"),
                    self._metric("CPUUtilizationNormalized", "Average"),
                ),
                graph("Invocations (every component)", self._metric("Invocations", "Sum", instance=False)),
            ],
        ]
        return cwl1.dashboard(self, "Dashboard", rows, period_override="auto")
