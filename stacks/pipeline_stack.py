"""The CDK Pipelines stack: source -> synth -> self-update -> assets -> one InferenceStage per environment,
in the order of `pipeline.stages`, each followed by a smoke test, with manual approvals where configured.

The pipeline deploys the very InferenceStage objects `cdk deploy '<env>/*'` deploys (built once by
app_builder, not a second copy), so a pipeline costs one small stack at synth, and what it deploys is what
the per-environment snapshots and compliance tests cover."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import pipelines
from constructs import Construct

from inferstack.constructs import nag
from inferstack.config import Environment
from inferstack.schema.models import PipelineSettings
from stacks.stage import InferenceStage

ROOT = Path(__file__).resolve().parent.parent
# Same image and Python for synth, self-update, asset publishing and smoke tests; Node 22 comes from
# package.json (`npm ci` in `make synth`), as on a developer machine.
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
PYTHON_VERSION = "3.11"


# Reasons for the wildcards CDK Pipelines writes into the roles it generates (see _acknowledge_generated).
ARTIFACTS_REASON = ("CDK's grant on this pipeline's own artifact bucket and its KMS key: object keys are "
                    "generated per execution, so the object and action wildcards stay inside that one bucket and key")
BUILD_OUTPUT_REASON = ("CodeBuild writes to log streams and report groups it names per build; the wildcard is "
                       "scoped to this project's own log group and report-group prefix")
ARTIFACT_READS = ("Action::s3:GetBucket*", "Action::s3:GetObject*", "Action::s3:List*")
ARTIFACT_WRITES = ("Action::s3:Abort*", "Action::s3:DeleteObject*")
KEY_USE = ("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")


def smoke_command(env_name: str) -> str:
    """The post-deploy check of an environment (inferstack/delivery/smoke.py), as the environment's smoke role
    (its foundation creates it, trusting the tooling account): internal load balancers through the
    foundation's in-VPC probe, SageMaker endpoints through the API."""
    return f'python -m inferstack smoke --env {env_name} --role-arn "$SMOKE_ROLE_ARN"'


def _pinned_npm_version(package: str) -> str:
    # One pin per tool: the pipeline's CodeBuild steps install the versions package.json pins for developers.
    return json.loads((ROOT / "package.json").read_text())["devDependencies"][package]


class PipelineStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: PipelineSettings,
                 stages: Mapping[str, InferenceStage], environments: Mapping[str, Environment],
                 triton_base_images: Mapping[str, str], **kwargs) -> None:
        """`stages`: the InferenceStage of every environment in `settings.stages`; `triton_base_images`:
        Triton base image URIs the asset builds pull, by environment (docker login to their registries)."""
        super().__init__(scope, construct_id, env=cdk.Environment(account=settings.account, region=settings.region),
                         **kwargs)
        missing = [name for name in settings.stages if name not in stages]
        if missing:
            raise ValueError(f"pipeline stages {missing} were not built; build every stage the pipeline deploys")
        self.settings = settings
        self.source = pipelines.CodePipelineSource.connection(
            settings.repository, settings.branch, connection_arn=settings.connection_arn)

        self.pipeline = pipelines.CodePipeline(
            self, "Pipeline",
            synth=pipelines.ShellStep("Synth", input=self.source, commands=["make synth"],
                                      primary_output_directory="cdk.out"),
            # Target accounts differ from the tooling account: their deploy roles must read the artifact
            # bucket, which needs a customer-managed KMS key they are granted (the AWS-managed one cannot be).
            cross_account_keys=True,
            enable_key_rotation=True,
            # Synth is offline and builds no image (images are built once, in the Assets stage, whose docker
            # projects CDK Pipelines makes privileged itself); the Triton base images need a registry login.
            docker_enabled_for_synth=False,
            docker_credentials=self._registry_credentials(triton_base_images),
            cli_version=_pinned_npm_version("aws-cdk"),
            cdk_assets_cli_version=_pinned_npm_version("cdk-assets"),
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=BUILD_IMAGE),
                partial_build_spec=codebuild.BuildSpec.from_object(
                    {"phases": {"install": {"runtime-versions": {"python": PYTHON_VERSION}}}})),
        )
        self.smoke_steps: dict[str, pipelines.CodeBuildStep] = {}
        for name in settings.stages:
            pre = ([pipelines.ManualApprovalStep(f"Approve-{name}", comment=f"Deploy the tested release to {name}")]
                   if name in settings.approval_before else [])
            self.smoke_steps[name] = self._smoke_step(name, environments[name])
            self.pipeline.add_stage(stages[name], pre=pre, post=[self.smoke_steps[name]])
        # Build now (not lazily at synth) so the generated roles and projects exist for the acknowledgements.
        self.pipeline.build_pipeline()
        self._acknowledge_generated()
        self._lint_clean_pipeline_resource()

    def _registry_credentials(self, triton_base_images: Mapping[str, str]) -> list[pipelines.DockerCredential]:
        """One ECR login per registry (account and region) the Triton builds pull from: cdk-assets logs in
        to the registry of a credential's first repository only, so repositories are not mixed."""
        registries: dict[tuple[str, str], dict[str, ecr.IRepository]] = {}
        for uri in sorted(set(triton_base_images.values())):
            registry, _, path = uri.partition("/")
            account, _, _, region, *_ = registry.split(".")
            name = path.split(":", 1)[0]
            repositories = registries.setdefault((account, region), {})
            if name not in repositories:
                repositories[name] = ecr.Repository.from_repository_arn(
                    self, f"BaseImage-{account}-{region}-{name}",
                    f"arn:{self.partition}:ecr:{region}:{account}:repository/{name}")
        return [pipelines.DockerCredential.ecr(list(repositories.values()),
                                               usages=[pipelines.DockerCredentialUsage.ASSET_PUBLISHING])
                for _, repositories in sorted(registries.items())]

    def _smoke_step(self, env_name: str, environment: Environment) -> pipelines.CodeBuildStep:
        """Installs the project from the same source revision and runs the smoke test as a role of the
        environment's account (CodeBuild's own role lives in the tooling account)."""
        role_arn = f"arn:{self.partition}:iam::{environment.account}:role/{self.settings.smoke_role_name}"
        return pipelines.CodeBuildStep(
            f"Smoke-{env_name}",
            input=self.source,
            env={"SMOKE_ROLE_ARN": role_arn, "AWS_REGION": environment.region,
                 "AWS_DEFAULT_REGION": environment.region},
            install_commands=["python3 -m venv .venv",
                              ".venv/bin/pip install --quiet -r requirements.txt -c constraints.txt"],
            # The smoke command assumes the role itself, from CodeBuild's credentials (--role-arn).
            commands=[". .venv/bin/activate", smoke_command(env_name)],
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[role_arn])],
        )

    def _acknowledge_generated(self) -> None:
        """cdk-nag findings on what CDK Pipelines generates, each on the policy (or bucket) that has it, one
        finding at a time. Anything new that CDK Pipelines starts generating fails synth until reviewed."""
        code_pipeline = self.pipeline.pipeline
        bucket_id = self.get_logical_id(code_pipeline.artifact_bucket.node.default_child)
        artifact_objects = f"Resource::<{bucket_id}.Arn>/*"

        def acknowledge_artifacts(policy: Construct, *, writes: bool, key_use: bool) -> None:
            findings = ARTIFACT_READS + (ARTIFACT_WRITES if writes else ()) + (KEY_USE if key_use else ())
            for finding in findings + (artifact_objects,):
                nag.acknowledge(policy, f"IAM5[{finding}]", ARTIFACTS_REASON)

        def acknowledge_build_output(project: codebuild.IProject) -> None:
            project_id = self.get_logical_id(project.node.default_child)
            where = f"{self.region}:{self.account}"
            for finding in (f"arn:{self.partition}:logs:{where}:log-group:/aws/codebuild/<{project_id}>:*",
                            f"arn:{self.partition}:codebuild:{where}:report-group/<{project_id}>-*"):
                nag.acknowledge(_default_policy(project.role), f"IAM5[Resource::{finding}]", BUILD_OUTPUT_REASON)

        # The pipeline's own role: artifacts, plus the cross-region replication bucket and key CDK puts in a
        # support stack per deploy region (known here only by generated name and alias, hence "*" for the key).
        pipeline_policy = _default_policy(code_pipeline.role)
        acknowledge_artifacts(pipeline_policy, writes=True, key_use=True)
        nag.acknowledge(pipeline_policy, "IAM5[Resource::*]",
                        "KMS use of the cross-region replication keys, which CDK references by alias from their "
                        "support stacks; each key's policy admits only this account and the deploy roles")
        for region, support in sorted(code_pipeline.cross_region_support.items()):
            nag.acknowledge(pipeline_policy, f"IAM5[Resource::arn:{self.partition}:s3:::"
                            f"{self.resolve(support.replication_bucket.bucket_name)}/*]",
                            f"objects of the {region} replication bucket CDK creates for the deploy actions there")
            nag.acknowledge(support.stack.node.find_child("Default").node.find_child(
                "CrossRegionCodePipelineReplicationBucket"), "S1",
                "transient pipeline artifacts copied for cross-region actions; access is only through the "
                "pipeline's roles and is recorded by CloudTrail")
        nag.acknowledge(code_pipeline.artifact_bucket, "S1",
                        "transient pipeline artifacts (source, cloud assembly); access is only through the "
                        "pipeline's roles and is recorded by CloudTrail")

        # The source action's role (CodePipeline names its construct after the repository).
        (source_role,) = [c for c in code_pipeline.node.find_child("Source").node.find_all() if isinstance(c, iam.Role)]
        acknowledge_artifacts(_default_policy(source_role), writes=True, key_use=True)

        acknowledge_artifacts(_default_policy(self.pipeline.synth_project.role), writes=True, key_use=True)
        acknowledge_build_output(self.pipeline.synth_project)

        mutation = self.pipeline.self_mutation_project
        acknowledge_artifacts(_default_policy(mutation.role), writes=False, key_use=True)
        acknowledge_build_output(mutation)
        nag.acknowledge(_default_policy(mutation.role), f"IAM5[Resource::arn:*:iam::{self.account}:role/*]",
                        "cdk deploy of this stack assumes the tooling account's bootstrap roles; a condition on "
                        "the aws-cdk:bootstrap-role tag admits only the deploy and publishing roles")
        nag.acknowledge(_default_policy(mutation.role), "IAM5[Resource::*]",
                        "cloudformation:DescribeStacks and s3:ListBucket, read-only calls cdk deploy makes before it "
                        "assumes the deploy role")

        for step in self.smoke_steps.values():
            acknowledge_artifacts(_default_policy(step.project.role), writes=False, key_use=True)
            acknowledge_build_output(step.project)

        # One role per asset type serves every asset project, so its log and report wildcards span them all.
        assets = self.pipeline.node.find_child("Assets")
        for role_id in ("DockerRole", "FileRole"):
            policy = assets.node.find_child(role_id).node.find_child("DefaultPolicy")
            acknowledge_artifacts(policy, writes=False, key_use=False)
            where = f"{self.region}:{self.account}"
            nag.acknowledge(policy, f"IAM5[Resource::arn:{self.partition}:logs:{where}:log-group:/aws/codebuild/*]",
                            "one publishing role serves every asset project, whose names CodeBuild generates")
            nag.acknowledge(policy, f"IAM5[Resource::arn:{self.partition}:codebuild:{where}:report-group/*]",
                            "one publishing role serves every asset project, whose names CodeBuild generates")
            nag.acknowledge(policy, "IAM5[Resource::*]",
                            "ecr:GetAuthorizationToken has no resource-level permissions, and the CodeBuild "
                            "start/stop calls cover asset projects CDK Pipelines creates per asset")


    def _lint_clean_pipeline_resource(self) -> None:
        """Two escape hatches so cfn-lint reports nothing on the generated AWS::CodePipeline::Pipeline, with
        the same meaning: cfn-lint 1.58 validates an action's RoleArn only as Fn::Sub or a string (E3703 on the
        Fn::Join CDK renders for cross-account roles), and flags the DependsOn on the pipeline role that its
        RoleArn already implies (W3005)."""
        code_pipeline = self.pipeline.pipeline
        cfn = code_pipeline.node.default_child
        for stage_index, stage in enumerate(self.resolve(cfn.stages)):
            # resolve() gives the L1 property names (camelCase); overrides take CloudFormation's.
            for action_index, action in enumerate(stage["actions"]):
                role = (action.get("configuration") or {}).get("RoleArn")
                if isinstance(role, dict) and "Fn::Join" in role:
                    cfn.add_property_override(f"Stages.{stage_index}.Actions.{action_index}.Configuration.RoleArn",
                                              {"Fn::Sub": _as_sub(role)})
        policy = _default_policy(code_pipeline.role).node.default_child
        cfn.add_override("DependsOn", [self.get_logical_id(policy)])


def _as_sub(value: dict) -> str:
    """{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::..."]]} -> "arn:${AWS::Partition}:iam::..."."""
    delimiter, parts = value["Fn::Join"]
    if delimiter != "":
        raise ValueError(f"unexpected Fn::Join delimiter in {value}")
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part.replace("${", "${!"))
        elif set(part) == {"Ref"} and part["Ref"].startswith("AWS::"):
            out.append("${" + part["Ref"] + "}")
        else:
            raise ValueError(f"cannot express {part} in Fn::Sub")
    return "".join(out)


def _default_policy(role: iam.IRole | None) -> Construct:
    if role is None:
        raise ValueError("expected a generated role")
    return role.node.find_child("DefaultPolicy")
