"""`python -m rehearsal.cli_deploy`: the README's deploy path, rehearsed with the real CDK CLI
against an AWS emulator (moto's server, with the named workarounds of moto_patches applied in its
process), on loopback, with no AWS account and no Docker daemon.

Steps, each with its own timeout, all within --timeout:
 1. `cdk synth` dev and `python -m inferstack release`: the release manifest (image assets and their tags).
 2. the emulator on a free 127.0.0.1 port; `cdk bootstrap aws://<dev account>/<region>`.
 3. publish dev's images: a small synthetic image per model, pushed with the ECR API to the bootstrap
    repository under the release's tag. It stands in for cdk-assets' `docker build` + push (no Docker here).
 4. pin dev to those digests (`release: {manifest: releases/dev.json}` in a copy of model_configs, as
    promote writes for staging/prod), `cdk synth` the pinned dev: no image asset is left to build.
 5. `cdk deploy --app <assembly> 'dev/*'`; then every stack read back with boto3 and checked against its
    template: status *_COMPLETE, every Output present, every Export registered with the output's value,
    the pinned digests in the ECS task definition and the SageMaker model.
 6. `python -m inferstack smoke --env dev --model M`, one Triton model at a time against its own canned reply
    (Neuron models reported as not run here, with the reason), and `promote --from dev --to staging` against the
    emulator: first refused by its load test gate (dev runs load tests here, and its results bucket holds no run
    of these images), then with --skip-load-test a dry run and --apply; what cannot run there is reported with
    the reason.
 7. day two (rehearsal/day_two.py): each production rule moved to its alternate target group and the
    services' and components' counts set, as ECS and autoscaling do, and each endpoint variant registered as a
    scalable target, as CloudFormation does; release N+1 (new digests, a batch size and a fleet's capacity
    changed, and with --add-models an autoscaled dedicated endpoint's instance type) deployed, then read back:
    production still on the group that served, the counts and scalable targets kept, the new task definition
    running, the endpoint on its new instance type under its name and its target registered again;
    `inferstack rollback --env dev` (dry run, --apply) and a deploy: N's digests run again, traffic and counts
    kept; a fleet member retired (its file and membership removed; `cdk destroy` of its stack from the assembly
    that has it, then a deploy without it): only its resources are gone.
 8. `cdk destroy --app <assembly> 'dev/*' --force` (`--all` finds no stack: they are in a Stage), then every
    resource the stacks ever had must be gone and no stack but CDKToolkit left; CDKToolkit is deleted too and
    what it retains is reported.
`--add-models` first adds one model of each kind under names that sort before, between and after the shipped
ones (day_two.SAMPLE_MODELS), as a platform team adds its own.
A report (steps, times, workarounds, what the emulator does not model) is printed at the end; the exit
code is 1 when a check failed. The server is killed and the scratch directory removed on every exit."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from inferstack.aws import stack_outputs
from inferstack.loadtest import runner
from rehearsal import day_two

ROOT = Path(__file__).resolve().parents[1]
ENV = "dev"
PROMOTE_TO = "staging"
# promote's target account is reached by assuming this role (moto issues credentials of its account).
PROMOTE_ROLE = "inferstack-rehearsal-deploy"
DEFAULT_TIMEOUT_S = 900
SERVER_START_TIMEOUT_S = 60
BOOTSTRAP_TIMEOUT_S = 180
SYNTH_TIMEOUT_S = 240
DEPLOY_TIMEOUT_S = 420
DESTROY_TIMEOUT_S = 300
TOOL_TIMEOUT_S = 120
SECRET = "rehearsal-secret"  # moto accepts any secret key


class RehearsalFailed(Exception):
    """A step or a check failed; the message names it."""


@dataclass
class Step:
    name: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class Result:
    steps: list[Step] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # what was verified
    problems: list[str] = field(default_factory=list)  # failed checks
    workarounds: list[str] = field(default_factory=list)  # moto patches applied in the server
    rules: list[str] = field(default_factory=list)  # AWS rules the server enforces (aws_rules)
    custom_resources_not_run: list[str] = field(default_factory=list)
    unmodeled: dict[str, list[str]] = field(default_factory=dict)  # resource type -> stacks
    not_run: list[str] = field(default_factory=list)  # README steps the emulator cannot run, and why
    tool_lines: dict[str, list[str]] = field(default_factory=dict)  # smoke / promote output
    leftovers: list[str] = field(default_factory=list)
    config_changes: list[str] = field(default_factory=list)  # what the rehearsal changed in its config copy
    neuron_deletion: str = ""
    total_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.ok for s in self.steps)


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Clock:
    """The overall deadline: each subprocess gets its own timeout, capped by what is left."""

    def __init__(self, total_s: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + total_s

    def left(self, wanted: float) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 1:
            raise RehearsalFailed("overall timeout reached")
        return min(wanted, remaining)


def _kill_group(process: subprocess.Popen) -> None:
    """Terminate `process` and its children (it leads its own process group), then wait for it."""
    runner.stop_groups([process], grace_s=10)


def run(args: list[str], *, env: dict[str, str], timeout: float, cwd: Path = ROOT) -> tuple[int, str]:
    """(exit code, stdout and stderr merged as printed). The CDK CLI prints to stderr, or to stdout when
    CI=true: read both. A command past its timeout is killed with its children and reported as 124."""
    process = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        _kill_group(process)
        output = process.stdout.read() if process.stdout else ""
        return 124, (output or "") + f"\n[killed after {timeout:.0f} s]"
    finally:
        _kill_group(process)


@contextlib.contextmanager
def emulator(workdir: Path, clock: Clock, patches: list[str] | None = None) -> Iterator[str]:
    """moto's server with the named patches, on a free loopback port; yields its endpoint URL."""
    log_path = workdir / "moto-server.log"
    for _attempt in range(3):  # the port is free when picked; another process may take it before the bind
        port = free_port()
        args = [sys.executable, "-m", "rehearsal.moto_server", "--port", str(port)]
        for name in patches or []:
            args += ["--patch", name]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        log = open(log_path, "ab")  # closed below
        process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        endpoint = f"http://127.0.0.1:{port}"
        try:
            give_up = time.monotonic() + clock.left(SERVER_START_TIMEOUT_S)
            while process.poll() is None and time.monotonic() < give_up:
                try:
                    with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                        break
                except OSError:
                    time.sleep(0.2)
            if process.poll() is None and time.monotonic() < give_up:
                yield endpoint
                return
        finally:
            _kill_group(process)
            log.close()
    raise RehearsalFailed(
        f"the emulator did not start (see {log_path}):\n" + log_path.read_text(errors="replace")[-2000:]
    )


# ----------------------------------------------------------------------------- AWS access


@dataclass
class Aws:
    endpoint: str
    account: str
    region: str

    def env(self, workdir: Path, ci: bool | None = None) -> dict[str, str]:
        """Environment of every CLI call: the emulator's endpoint, an access key naming the account
        (moto patch account-from-access-key), a private CDK home (the CLI caches each access key's account
        under ~/.cdk/cache: a shared one would keep an answer from another emulator run), the project's
        Node 22 and virtual environment first on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_", "CDK_")) and k != "CI"}
        if ci is None and os.environ.get("CI"):
            env["CI"] = os.environ["CI"]
        elif ci:
            env["CI"] = "true"
        env.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": self.account,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_EC2_METADATA_DISABLED": "true",
                "CDK_HOME": str(workdir / "cdk-home"),
                "CDK_DISABLE_CLI_TELEMETRY": "true",
                "PYTHONPATH": str(ROOT),
                "PATH": os.pathsep.join(
                    [str(ROOT / "node_modules" / ".bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
                ),
            }
        )
        return env

    def client(self, service: str, account: str | None = None):
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=account or self.account,
            aws_secret_access_key=SECRET,
        )


# ----------------------------------------------------------------------------- assembly and templates


@dataclass
class StackArtifact:
    artifact_id: str
    stack_name: str
    template: dict
    dependencies: list[str]


def stacks_of(cdk_out: Path, env_name: str = ENV) -> list[StackArtifact]:
    """The environment's stacks in the nested assembly, in dependency order."""
    directory = cdk_out / f"assembly-{env_name}"
    manifest = json.loads((directory / "manifest.json").read_text())
    found = {}
    for artifact_id, artifact in manifest["artifacts"].items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        properties = artifact["properties"]
        found[artifact_id] = StackArtifact(
            artifact_id,
            properties.get("stackName", artifact_id),
            json.loads((directory / properties["templateFile"]).read_text()),
            [d for d in artifact.get("dependencies") or []],
        )
    ordered: list[StackArtifact] = []
    while len(ordered) < len(found):
        ready = [
            s
            for s in found.values()
            if s not in ordered and all(d not in found or found[d] in ordered for d in s.dependencies)
        ]
        if not ready:
            raise RehearsalFailed(f"dependency cycle among {sorted(found)}")
        ordered += ready
    return ordered


def resolved_literal(value) -> str | None:
    """A template value that is a plain string (CDK writes export names as literals)."""
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------------------- the steps


def publish_images(aws: Aws, release_manifest: dict, label: str) -> dict[str, dict]:
    """Push one small synthetic image per model of dev to the repository and tag its image asset names in
    the release: config blob and one layer uploaded with the ECR layer API, then the manifest. `label` names
    the release (N, N+1): each label gives other digests, under a tag of its own. Returns
    model -> {repository_uri, digest, tag}."""
    from inferstack.delivery import release

    ecr = aws.client("ecr")
    published = {}
    stacks = release_manifest["environments"][ENV]["stacks"]
    for model, stack in sorted(stacks.items()):
        if not stack.get("images") or model == stack_outputs.LOAD_TEST:
            continue  # the load-test tool is built from the commit, not pinned: publish_tool_images
        (image,) = [
            i
            for i in release.model_images(release_manifest, model)
            if i["repository"] == stack["images"][0]["repository"] and i["tag"] == stack["images"][0]["tag"]
        ]
        tag = image["tag"] if label == "N" else f"{image['tag'][:100]}-{label.replace('+', 'plus')}"
        same = next(
            (
                p
                for p in published.values()
                if (p["repository_uri"], p["tag"]) == (image["image_uri"].rsplit(":", 1)[0], tag)
            ),
            None,
        )
        if same is not None:  # two models built from one image asset (same context and arguments): one image
            published[model] = dict(same)
            continue
        text = f"inferstack rehearsal image of {model}, asset {image['asset_id']}, release {label}"
        digest = push_synthetic_image(ecr, image["repository"], tag, model, text)
        published[model] = {"repository_uri": image["image_uri"].rsplit(":", 1)[0], "digest": digest, "tag": tag}
    return published


def push_synthetic_image(ecr, repository: str, tag: str, label: str, text: str) -> str:
    """A small image (one layer holding `text`) pushed with the ECR layer API under `tag`; returns its digest."""
    layer = f"{text}\n".encode()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": {"model": label}},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        },
        sort_keys=True,
    ).encode()
    for blob in (config, layer):
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        upload = ecr.initiate_layer_upload(repositoryName=repository)
        ecr.upload_layer_part(
            repositoryName=repository,
            uploadId=upload["uploadId"],
            partFirstByte=0,
            partLastByte=len(blob) - 1,
            layerPartBlob=blob,
        )
        ecr.complete_layer_upload(repositoryName=repository, uploadId=upload["uploadId"], layerDigests=[digest])
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": "sha256:" + hashlib.sha256(layer).hexdigest(),
                }
            ],
        },
        indent=3,
    )
    put = ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag)
    return put["image"]["imageId"]["imageDigest"]


def tool_image_assets(cdk_out: Path) -> dict[str, list[tuple[str, str]]]:
    """Stack artifact id -> (repository, tag) of each image asset the environment still builds once pinned."""
    found: dict[str, list[tuple[str, str]]] = {}
    for manifest in sorted((cdk_out / f"assembly-{ENV}").glob("*.assets.json")):
        for image in (json.loads(manifest.read_text()).get("dockerImages") or {}).values():
            for destination in image["destinations"].values():
                found.setdefault(manifest.name.removesuffix(".assets.json"), []).append(
                    (str(destination["repositoryName"]), str(destination["imageTag"]))
                )
    return found


def publish_tool_images(aws: Aws, cdk_out: Path, stacks: list[StackArtifact]) -> list[str]:
    """What cdk-assets would push after `docker build` for the image assets a pinned dev still builds (only the
    load-test generators' image: built from the commit being deployed, not promoted): a synthetic image under
    the asset's own repository and tag, unless already there. `cdk deploy` then finds it and builds nothing."""
    from botocore.exceptions import ClientError

    ecr = aws.client("ecr")
    load_test = [st.artifact_id for st in stacks if st.stack_name == f"{ENV}-{stack_outputs.LOAD_TEST}"]
    pushed = []
    for artifact, images in sorted(tool_image_assets(cdk_out).items()):
        if artifact not in load_test:
            raise RehearsalFailed(
                f"pinned dev still builds image assets in {artifact}: only the load-test "
                f"generators' image is built from the commit"
            )
        for repository, tag in images:
            repository = repository.replace("${AWS::AccountId}", aws.account).replace("${AWS::Region}", aws.region)
            try:
                ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
                continue
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ImageNotFoundException":
                    raise
            push_synthetic_image(
                ecr,
                repository,
                tag,
                stack_outputs.LOAD_TEST,
                f"inferstack rehearsal image of the load-test generators, tag {tag}",
            )
            pushed.append(f"{repository}:{tag[:12]}")
    return pushed


def pin_dev(config_dir: Path, published: dict[str, dict], release_manifest: dict) -> None:
    """Write releases/dev.json (the format promote writes) and record it in dev's pin history, as promote
    records what it writes: rollback reads that history."""
    from inferstack.config import pin_history
    from inferstack.config.release_pin import PIN_FORMAT, PinnedImage, ReleaseIdentity, ReleasePin, dump

    pin = ReleasePin(
        format=PIN_FORMAT,
        environment=ENV,
        promoted_from=ENV,
        release=ReleaseIdentity(
            commit=release_manifest.get("commit"), config_sha256=release_manifest.get("config_sha256")
        ),
        images={
            m: PinnedImage(repository_uri=p["repository_uri"], digest=p["digest"], tag=p["tag"])
            for m, p in published.items()
        },
    )
    pin_path = config_dir / "releases" / f"{ENV}.json"
    pin_path.parent.mkdir(exist_ok=True)
    pin_path.write_text(dump(pin))
    pin_history.append(
        pin_history.history_path(pin_path, ENV), pin_history.new_entry(pin, cwd=config_dir, promoted_from=ENV)
    )


def point_environments_at_pins(config_dir: Path) -> None:
    """Point dev at releases/dev.json; give staging a deploy role so promote reaches staging's account through
    STS, as with separate accounts."""
    env_file = config_dir / "environments.yaml"
    text = env_file.read_text()
    lines = text.splitlines(keepends=True)
    out, section = [], None
    for line in lines:
        out.append(line)
        stripped = line.rstrip("\n")
        if stripped in (f"  {ENV}:", f"  {PROMOTE_TO}:"):
            section = stripped.strip(" :")
            if section == ENV:
                out.append(f"    release: {{manifest: releases/{ENV}.json}}\n")
    text = "".join(out)
    staging_account = _yaml_account(text, PROMOTE_TO)
    marker = f"  {PROMOTE_TO}:\n"
    if marker not in text or staging_account is None:
        raise RehearsalFailed(f"{env_file}: no {PROMOTE_TO} environment with an account to promote to")
    text = text.replace(
        marker, marker + f"    deploy_role_arn: arn:aws:iam::{staging_account}:role/{PROMOTE_ROLE}\n", 1
    )
    env_file.write_text(text)


def _yaml_account(text: str, env_name: str) -> str | None:
    import yaml

    return str(((yaml.safe_load(text).get("environments") or {}).get(env_name) or {}).get("account") or "") or None


def check_stacks(aws: Aws, stacks: list[StackArtifact], result: Result) -> dict[str, dict[str, tuple[str, str]]]:
    """Every stack *_COMPLETE, its outputs exactly the template's, its exports registered with the output's
    value; returns stack -> logical id -> (type, physical id)."""
    from moto.cloudformation.parsing import get_model_map

    from rehearsal import moto_patches

    # What the emulator models: moto's own types and those its patches add (they live in its process).
    model_map = set(get_model_map()) | moto_patches.MODELED_BY_PATCHES
    cloudformation = aws.client("cloudformation")
    exports = {
        e["Name"]: e for page in cloudformation.get_paginator("list_exports").paginate() for e in page["Exports"]
    }
    resources: dict[str, dict[str, tuple[str, str]]] = {}
    for stack in stacks:
        try:
            (described,) = cloudformation.describe_stacks(StackName=stack.stack_name)["Stacks"]
        except Exception as exc:  # reported as a failed check
            result.problems.append(f"{stack.stack_name}: not found after deploy ({exc})")
            continue
        status = described["StackStatus"]
        if not status.endswith("_COMPLETE") or "ROLLBACK" in status or status.startswith("DELETE"):
            result.problems.append(f"{stack.stack_name}: status {status} ({described.get('StackStatusReason')})")
        outputs = {o["OutputKey"]: o for o in described.get("Outputs") or []}
        wanted = stack.template.get("Outputs") or {}
        missing = sorted(set(wanted) - set(outputs))
        extra = sorted(set(outputs) - set(wanted))
        if missing or extra:
            result.problems.append(
                f"{stack.stack_name}: outputs missing {missing or 'none'}, unexpected {extra or 'none'}"
            )
        for key, output in wanted.items():
            name = resolved_literal((output.get("Export") or {}).get("Name"))
            if name is None:
                continue
            export = exports.get(name)
            if export is None:
                result.problems.append(f"{stack.stack_name}: export {name} (output {key}) not registered")
            elif export["ExportingStackId"] != described["StackId"]:
                result.problems.append(f"{stack.stack_name}: export {name} belongs to {export['ExportingStackId']}")
            elif key in outputs and export["Value"] != outputs[key]["OutputValue"]:
                result.problems.append(
                    f"{stack.stack_name}: export {name} = {export['Value']!r}, output {key} = "
                    f"{outputs[key]['OutputValue']!r}"
                )
        for key, output in outputs.items():
            if not output.get("OutputValue"):
                result.problems.append(f"{stack.stack_name}: output {key} is empty")
        summaries = [
            r
            for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack.stack_name)
            for r in page["StackResourceSummaries"]
        ]
        resources[stack.stack_name] = {
            r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", "")) for r in summaries
        }
        for logical, resource in stack.template.get("Resources", {}).items():
            kind = resource["Type"]
            if kind not in model_map and not kind.startswith("Custom::"):
                result.unmodeled.setdefault(kind, [])
                if stack.stack_name not in result.unmodeled[kind]:
                    result.unmodeled[kind].append(stack.stack_name)
            elif logical not in resources[stack.stack_name]:
                result.problems.append(f"{stack.stack_name}: {logical} ({kind}) modeled by moto but not created")
        result.checks.append(
            f"{stack.stack_name}: {status}, {len(outputs)}/{len(wanted)} outputs, "
            f"{sum(1 for o in wanted.values() if o.get('Export'))} exports"
        )
    return resources


def check_pinned_images(
    aws: Aws, published: dict[str, dict], outputs_by_stack: dict[str, dict[str, str]], result: Result
) -> None:
    """The deployed ECS task definitions and SageMaker models run the pinned digests."""
    ecs, sagemaker = aws.client("ecs"), aws.client("sagemaker")
    for model, pin in sorted(published.items()):
        outputs = outputs_by_stack.get(f"{ENV}-{model}", {})
        expected = f"{pin['repository_uri']}@{pin['digest']}"
        if "ServiceName" in outputs:
            service = ecs.describe_services(cluster=outputs["ClusterName"], services=[outputs["ServiceName"]])
            definition = ecs.describe_task_definition(taskDefinition=service["services"][0]["taskDefinition"])
            images = [c["image"] for c in definition["taskDefinition"]["containerDefinitions"]]
        elif "InferenceComponentName" in outputs:  # on a fleet's shared endpoint: the component names the model
            component = sagemaker.describe_inference_component(InferenceComponentName=outputs["InferenceComponentName"])
            if component["EndpointName"] != outputs.get("EndpointName"):
                result.problems.append(
                    f"{ENV}-{model}: component {outputs['InferenceComponentName']} is on endpoint "
                    f"{component['EndpointName']}, its stack says {outputs.get('EndpointName')}"
                )
            images = [
                sagemaker.describe_model(ModelName=component["Specification"]["ModelName"])["PrimaryContainer"]["Image"]
            ]
        elif "EndpointName" in outputs:
            endpoint = sagemaker.describe_endpoint(EndpointName=outputs["EndpointName"])
            config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
            images = [
                sagemaker.describe_model(ModelName=v["ModelName"])["PrimaryContainer"]["Image"]
                for v in config["ProductionVariants"]
            ]
        else:
            result.problems.append(f"{ENV}-{model}: no ServiceName or EndpointName output to find its image")
            continue
        if images != [expected]:
            result.problems.append(f"{ENV}-{model}: runs {images}, pinned {expected}")
        else:
            result.checks.append(f"{ENV}-{model}: runs the pinned {expected}")


def check_load_test(aws: Aws, outputs_by_stack: dict[str, dict[str, str]], config_dir: Path, result: Result) -> None:
    """dev's LoadTest stack (load_test enabled in the rehearsal's config copy) as a run would use it: what its
    outputs name exists; both task definitions are Fargate-only, awsvpc, sized from the config; the master
    admits its workers on Locust's port and nothing else; the results bucket is KMS-encrypted; the foundation's
    PrivateSubnets map no public IP."""
    import yaml

    from inferstack.constructs.load_test import LOCUST_PORT

    stack = stack_outputs.stack_name(ENV, stack_outputs.LOAD_TEST)
    outputs = outputs_by_stack.get(stack)
    if outputs is None:
        result.problems.append(f"{stack}: not deployed although dev has load_test in the rehearsal's config")
        return
    settings = yaml.safe_load((config_dir / "environments.yaml").read_text())["environments"][ENV]["load_test"]
    ecs, ec2, s3 = aws.client("ecs"), aws.client("ec2"), aws.client("s3")
    problems = []
    clusters = ecs.describe_clusters(clusters=[outputs[stack_outputs.CLUSTER]])["clusters"]
    if [c["status"] for c in clusters] != ["ACTIVE"]:
        problems.append(f"cluster {outputs[stack_outputs.CLUSTER]}: {clusters}")
    for key, container, role in (
        (stack_outputs.MASTER_TASK_DEFINITION, stack_outputs.MASTER_CONTAINER, "master"),
        (stack_outputs.WORKER_TASK_DEFINITION, stack_outputs.WORKER_CONTAINER, "worker"),
    ):
        definition = ecs.describe_task_definition(taskDefinition=outputs[key])["taskDefinition"]
        (spec,) = definition["containerDefinitions"]
        seen = (
            definition.get("requiresCompatibilities"),
            definition.get("networkMode"),
            str(definition.get("cpu")),
            str(definition.get("memory")),
            spec.get("name"),
            spec.get("command"),
        )
        wanted = (
            ["FARGATE"],
            "awsvpc",
            str(settings["worker_cpu"]),
            str(settings["worker_memory_mib"]),
            outputs[container],
            [role],
        )
        if seen != wanted:
            problems.append(f"{key}: {seen}, expected {wanted}")
    groups = {
        g["GroupId"]: g
        for g in ec2.describe_security_groups(
            GroupIds=[outputs[stack_outputs.MASTER_SECURITY_GROUP], outputs[stack_outputs.WORKER_SECURITY_GROUP]]
        )["SecurityGroups"]
    }
    ingress = [
        (
            p["IpProtocol"],
            p.get("FromPort"),
            p.get("ToPort"),
            tuple(sorted(g["GroupId"] for g in p.get("UserIdGroupPairs", []))),
            tuple(r["CidrIp"] for r in p.get("IpRanges", [])),
        )
        for p in groups[outputs[stack_outputs.MASTER_SECURITY_GROUP]]["IpPermissions"]
    ]
    if ingress != [("tcp", LOCUST_PORT, LOCUST_PORT, (outputs[stack_outputs.WORKER_SECURITY_GROUP],), ())]:
        problems.append(f"master security group admits {ingress}")
    if groups[outputs[stack_outputs.WORKER_SECURITY_GROUP]]["IpPermissions"]:
        problems.append("the workers' security group admits traffic")
    bucket = outputs[stack_outputs.RESULTS_BUCKET]
    (rule,) = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    if rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] != "aws:kms":
        problems.append(f"results bucket {bucket}: {rule}")
    result.not_run.append(
        "the results bucket's expiry, versioning, access logging and public access block: moto 5.2.5's "
        "CloudFormation gives a bucket its encryption and tags only (the template's rules: "
        "tests/stacks/test_load_test_stack.py); no load test runs here (tests/loadtest/test_fargate_run.py runs "
        "them on the stack's template, through a stand-in for Fargate)"
    )
    foundation = outputs_by_stack.get(stack_outputs.stack_name(ENV, stack_outputs.FOUNDATION), {})
    subnets = ec2.describe_subnets(SubnetIds=foundation.get(stack_outputs.PRIVATE_SUBNETS, "").split(","))["Subnets"]
    if not subnets or any(s["MapPublicIpOnLaunch"] for s in subnets):
        problems.append(f"PrivateSubnets: {[(s['SubnetId'], s['MapPublicIpOnLaunch']) for s in subnets]}")
    result.problems += [f"{stack}: {p}" for p in problems]
    if not problems:
        result.checks.append(
            f"{stack}: cluster, Fargate master and worker ({settings['worker_cpu']} CPU, "
            f"{settings['worker_memory_mib']} MiB), master admitting its workers on {LOCUST_PORT} "
            f"only, KMS results bucket, {len(subnets)} private subnets without public IPs"
        )


def seed_reply(aws: Aws, model) -> None:
    """Queue one canned InvokeEndpoint reply: a KServe v2 answer with the outputs `model`'s interface promises.
    moto hands a queued reply to the first request it has not seen and the same reply to that request again,
    whichever endpoint it names: so one model is seeded and smoked at a time, and every reply reaches the
    model it was made for, in any order of names."""
    from inferstack.loadtest import probes

    outputs = [
        {"name": o.name, "datatype": o.datatype, "shape": list(o.shape), "data": [0] * _product(o.shape)}
        for o in probes.probe_for(model).outputs
    ]
    request = urllib.request.Request(
        f"{aws.endpoint}/moto-api/static/sagemaker/endpoint-results",
        method="POST",
        data=json.dumps(
            {
                "account_id": aws.account,
                "region": aws.region,
                "results": [
                    {
                        "Body": json.dumps({"model_name": model.name, "outputs": outputs}),
                        "ContentType": "application/json",
                    }
                ],
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


SMOKE_NOT_RUN = (
    "Neuron models (not run here): their internal load balancer is reached through the "
    "foundation's probe Lambda, which moto runs only in Docker, and a load balancer in moto serves "
    "nothing"
)


def smoke_each(aws: Aws, env: dict[str, str], config_dir: Path, clock: Clock, result: Result) -> str:
    """`inferstack smoke --env dev --model M` for every Triton model deployed in dev, each against its own canned
    reply: checks smoke's discovery (stack outputs), its InvokeEndpoint call and its reply checks, not a model.
    Neuron models are reported as not run, with the reason, not as failures."""
    from inferstack.config import loader
    from inferstack.schema import kinds

    project = loader.load(config_dir, releases=False)
    models = sorted(project.models_in(ENV), key=lambda m: m.name)
    triton = [m for m in models if kinds.model_kind(m).hosting == "sagemaker"]
    neuron = [m.name for m in models if kinds.model_kind(m).hosting != "sagemaker"]
    lines = []
    for model in triton:
        seed_reply(aws, model)
        code, output = run(
            [
                sys.executable,
                "-m",
                "inferstack",
                "smoke",
                "--env",
                ENV,
                "--model",
                model.name,
                "--config-dir",
                str(config_dir),
                "--requests",
                "2",
                "--timeout",
                "5",
                # moto's latency on a shared machine says nothing about a model: printed, not checked
                "--latency",
                "report",
            ],
            env=env,
            timeout=clock.left(TOOL_TIMEOUT_S),
        )
        found = [line for line in output.splitlines() if line.strip()]
        lines += found
        if code != 0 or not any(line.startswith(f"{model.name}: ok:") for line in found):
            result.problems.append(
                f"smoke: {model.name} (SageMaker, its own canned reply) did not pass: exit {code}: {found[-3:]}"
            )
    result.tool_lines["smoke"] = lines
    if neuron:
        result.not_run.append(f"smoke of {', '.join(neuron)}: " + SMOKE_NOT_RUN)
    result.not_run.append(
        "smoke of Triton models ran against moto's canned InvokeEndpoint replies (seeded one model "
        "at a time through /moto-api/static/sagemaker/endpoint-results): discovery, the call and "
        "the reply checks, not a model, nor latency (--latency report)"
    )
    return (
        f"SageMaker models checked against canned replies: {', '.join(m.name for m in triton) or 'none'}; "
        f"not run here: {', '.join(neuron) or 'none'}"
    )


def check_config_change(aws: Aws, outputs_by_stack: dict[str, dict[str, str]], result: Result) -> str:
    """Release N+1's config change reached the deployment: the batch size in the fleet's task definition."""
    outputs = outputs_by_stack[f"{ENV}-{day_two.CHANGED_FLEET}"]
    ecs = aws.client("ecs")
    (service,) = ecs.describe_services(cluster=outputs["ClusterName"], services=[outputs["ServiceName"]])["services"]
    definition = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
    environment = {e["name"]: e["value"] for c in definition["containerDefinitions"] for e in c.get("environment", [])}
    # The fleet's serving settings, one entry per model (container/neuron/serving/server_settings.py reads them).
    served = {m["name"]: m for m in json.loads(environment.get("SERVER_MODELS", "[]"))}
    if (served.get(day_two.CHANGED_MODEL) or {}).get("max_batch_size") != day_two.CHANGED_BATCH_SIZE:
        result.problems.append(
            f"release N+1: {day_two.CHANGED_MODEL}'s batch size {day_two.CHANGED_BATCH_SIZE} not in "
            f"the running task definition ({service['taskDefinition']})"
        )
    return (
        f"release N+1: the running task definition {service['taskDefinition'].rsplit('/', 1)[-1]} serves "
        f"{day_two.CHANGED_MODEL} with batch size {day_two.CHANGED_BATCH_SIZE}"
    )


def check_instance_type_change(
    aws: Aws, outputs_by_stack: dict[str, dict[str, str]], live: day_two.LiveState, result: Result
) -> str:
    """Release N+1 moved RETYPED_MODEL's autoscaled endpoint to RETYPED_TO in that one deploy: InService under its
    name, its variant on the new type, and its scalable target registered again after day two registered it (the
    scaling handover deregistered it before the Endpoint's update, which the emulator refuses while it is
    registered: rule autoscaled-variant-update) with the range, policies and scheduled actions it had."""
    stack = f"{ENV}-{day_two.RETYPED_MODEL}"
    name = outputs_by_stack[stack]["EndpointName"]
    sagemaker, scaling = aws.client("sagemaker"), aws.client("application-autoscaling")
    endpoint = sagemaker.describe_endpoint(EndpointName=name)
    variants = {
        v["VariantName"]: v.get("InstanceType")
        for v in sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])[
            "ProductionVariants"
        ]
    }
    registered = [t for resource_id, t in live.targets.items() if resource_id.startswith(f"endpoint/{name}/variant/")]
    problems = [] if endpoint["EndpointStatus"] == "InService" else [f"endpoint {endpoint['EndpointStatus']}"]
    if len(registered) != 1 or set(variants.values()) != {day_two.RETYPED_TO}:
        problems.append(f"variants {variants}, {len(registered)} registered as scalable targets on day two")
    else:
        (before,) = registered
        after = day_two.described_target(scaling, before.resource_id)
        if after is None:
            problems.append(f"{before.resource_id} not registered again")
        elif after.registered_at <= before.registered_at:
            problems.append(f"{before.resource_id} never deregistered, although its instance type changed")
        elif (after.capacity, after.policies, after.scheduled) != (before.capacity, before.policies, before.scheduled):
            problems.append(f"{before.resource_id} registered again as {after}, day two registered {before}")
    result.problems += [f"release N+1: {stack}: {p}" for p in problems]
    if problems:
        return f"release N+1: {stack}'s instance-type change read back ({len(problems)} problems)"
    (target,) = registered
    return (
        f"release N+1: {name} InService on {day_two.RETYPED_TO} (variant {', '.join(variants)}) in one deploy; "
        f"{target.resource_id} registered again as a scalable target ({target.capacity[0]}-{target.capacity[1]}; "
        f"scaling policies: {len(target.policies)}, scheduled actions: {len(target.scheduled)})"
    )


# What a neuron-cores fleet's stack replaces when a member leaves: the task definition (a new revision serving the
# members left, on the cores re-split among them) and the dashboard (its rows for the member go; moto names a
# dashboard anew on every update). Its load balancer, listener, the other members' target groups and rules and
# the service keep their physical ids: the members left are where their callers find them.
FLEET_MEMBER_RETIREMENT_REPLACES = {"AWS::ECS::TaskDefinition", "AWS::CloudWatch::Dashboard"}


def check_retired(
    aws: Aws,
    before: dict[str, dict[str, tuple[str, str]]],
    after: dict[str, dict[str, tuple[str, str]]],
    retired_stack: str,
    result: Result,
    members_left: dict[str, tuple[str, int]] | None = None,
) -> None:
    """Only the retired model's stack and resources are gone; every other stack kept its resources (same
    physical ids), the shared endpoint among them. `members_left`: fleet stack -> (the member that left it, its
    port): its own resources (named under it, and the task security group's ingress on its port) go, and the
    fleet replaces only FLEET_MEMBER_RETIREMENT_REPLACES."""
    members_left = members_left or {}
    gone = before.get(retired_stack, {})
    if retired_stack in after:
        result.problems.append(f"retire: {retired_stack} still deployed")
    leftovers, _counted, _unchecked = still_there(aws, {retired_stack: gone})
    if leftovers:
        result.problems.append(f"retire: left behind: {'; '.join(leftovers)}")
    for name, logical in sorted(before.items()):
        if name == retired_stack:
            continue
        member_name, port = members_left.get(name, ("", 0))
        member = re.sub(r"[^A-Za-z0-9]", "", member_name)

        # Called only within this loop step: the defaults bind this step's member and port.
        def members_own(logical_id: str, kind: str, member: str = member, port: int = port) -> bool:
            # CDK names an ingress "...from<peer>:<port>", then its 8-character hash.
            return member in logical_id or (
                kind == "AWS::EC2::SecurityGroupIngress" and re.search(rf"{port}[0-9A-F]{{8}}$", logical_id) is not None
            )

        changed = sorted(
            k
            for k, v in logical.items()
            if after.get(name, {}).get(k) != v
            and not v[0].startswith("Custom::")
            and not (member and k not in after.get(name, {}) and members_own(k, v[0]))
            and not (member and k in after.get(name, {}) and v[0] in FLEET_MEMBER_RETIREMENT_REPLACES)
        )
        if changed:
            result.problems.append(f"retire: {name} changed beside the retired model: {changed[:5]}")
        if member:
            left = sorted(k for k in logical if member in k and k in after.get(name, {}))
            if left:
                result.problems.append(f"retire: {name} still holds {members_left[name]}'s {left[:3]}")
    if not any(p.startswith("retire:") for p in result.problems):
        result.checks.append(
            f"retire: {retired_stack} and its {len(gone)} resources gone; {len(before) - 1} other "
            f"stacks kept every resource (same physical ids)"
            + "".join(
                f"; {stack} lost {member}'s own resources and rolled a new task definition, "
                f"its load balancer and the other members' routes unchanged"
                for stack, (member, _) in sorted(members_left.items())
            )
        )


def _product(shape) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


# What is gone after destroy: resource type -> (client, exists(physical id) -> bool).
def _exists_checks(aws: Aws) -> dict[str, Callable[[str], bool]]:
    from botocore.exceptions import ClientError

    def quiet(call: Callable[[], bool]) -> bool:
        try:
            return call()
        except ClientError:
            return False

    ec2, ecs, sm = aws.client("ec2"), aws.client("ecs"), aws.client("sagemaker")
    elbv2, asg, lam = aws.client("elbv2"), aws.client("autoscaling"), aws.client("lambda")
    kms, logs, sns, iam, s3 = (aws.client(s) for s in ("kms", "logs", "sns", "iam", "s3"))

    def name_of(arn: str) -> str:
        return arn.rsplit("/", 1)[-1]

    return {
        "AWS::EC2::VPC": lambda i: quiet(lambda: bool(ec2.describe_vpcs(VpcIds=[i])["Vpcs"])),
        "AWS::EC2::Subnet": lambda i: quiet(lambda: bool(ec2.describe_subnets(SubnetIds=[i])["Subnets"])),
        "AWS::EC2::SecurityGroup": lambda i: quiet(
            lambda: bool(ec2.describe_security_groups(GroupIds=[i])["SecurityGroups"])
        ),
        "AWS::EC2::NatGateway": lambda i: quiet(
            lambda: any(
                g["State"] not in ("deleted", "deleting")
                for g in ec2.describe_nat_gateways(NatGatewayIds=[i])["NatGateways"]
            )
        ),
        "AWS::EC2::LaunchTemplate": lambda i: quiet(
            lambda: bool(ec2.describe_launch_templates(LaunchTemplateIds=[i])["LaunchTemplates"])
        ),
        "AWS::ECS::Cluster": lambda i: quiet(
            lambda: any(c["status"] != "INACTIVE" for c in ecs.describe_clusters(clusters=[i])["clusters"])
        ),
        "AWS::ECS::TaskDefinition": lambda i: quiet(
            lambda: ecs.describe_task_definition(taskDefinition=i)["taskDefinition"]["status"] == "ACTIVE"
        ),
        "AWS::SageMaker::Endpoint": lambda i: quiet(lambda: bool(sm.describe_endpoint(EndpointName=name_of(i)))),
        "AWS::SageMaker::EndpointConfig": lambda i: quiet(
            lambda: bool(sm.describe_endpoint_config(EndpointConfigName=name_of(i)))
        ),
        "AWS::SageMaker::Model": lambda i: quiet(lambda: bool(sm.describe_model(ModelName=name_of(i)))),
        "AWS::SageMaker::InferenceComponent": lambda i: quiet(
            lambda: bool(sm.describe_inference_component(InferenceComponentName=name_of(i)))
        ),
        "AWS::ElasticLoadBalancingV2::LoadBalancer": lambda i: quiet(
            lambda: bool(elbv2.describe_load_balancers(LoadBalancerArns=[i])["LoadBalancers"])
        ),
        "AWS::ElasticLoadBalancingV2::TargetGroup": lambda i: quiet(
            lambda: bool(elbv2.describe_target_groups(TargetGroupArns=[i])["TargetGroups"])
        ),
        "AWS::AutoScaling::AutoScalingGroup": lambda i: quiet(
            lambda: bool(asg.describe_auto_scaling_groups(AutoScalingGroupNames=[i])["AutoScalingGroups"])
        ),
        "AWS::Lambda::Function": lambda i: quiet(lambda: bool(lam.get_function(FunctionName=i))),
        "AWS::KMS::Key": lambda i: quiet(
            lambda: kms.describe_key(KeyId=i)["KeyMetadata"]["KeyState"] not in ("PendingDeletion",)
        ),
        "AWS::Logs::LogGroup": lambda i: quiet(
            lambda: any(g["logGroupName"] == i for g in logs.describe_log_groups(logGroupNamePrefix=i)["logGroups"])
        ),
        "AWS::SNS::Topic": lambda i: quiet(lambda: bool(sns.get_topic_attributes(TopicArn=i))),
        "AWS::IAM::Role": lambda i: quiet(lambda: bool(iam.get_role(RoleName=i))),
        "AWS::S3::Bucket": lambda i: quiet(lambda: bool(s3.head_bucket(Bucket=i))),
    }


def still_there(aws: Aws, resources: dict[str, dict[str, tuple[str, str]]]) -> tuple[list[str], int, set[str]]:
    """(resources that still exist, how many were checked, types no check exists for)."""
    checks = _exists_checks(aws)
    found, unchecked, counted = [], set(), 0
    for stack, logical in resources.items():
        for logical_id, (kind, physical) in sorted(logical.items()):
            check = checks.get(kind)
            if check is None or not physical:
                unchecked.add(kind)
                continue
            counted += 1
            if check(physical):
                found.append(f"{stack}/{logical_id} ({kind}) {physical}")
    return found, counted, unchecked


def check_destroyed(aws: Aws, resources: dict[str, dict[str, tuple[str, str]]], result: Result) -> None:
    cloudformation = aws.client("cloudformation")
    live = [
        s["StackName"]
        for page in cloudformation.get_paginator("list_stacks").paginate()
        for s in page["StackSummaries"]
        if s["StackStatus"] != "DELETE_COMPLETE"
    ]
    if sorted(live) != ["CDKToolkit"]:
        result.problems.append(f"stacks left after cdk destroy: {sorted(s for s in live if s != 'CDKToolkit')}")
    leftovers, counted, unchecked = still_there(aws, resources)
    result.leftovers += leftovers
    if result.leftovers:
        result.problems.append(
            f"{len(result.leftovers)} resource(s) left after cdk destroy: " + "; ".join(result.leftovers)
        )
    result.checks.append(
        f"after cdk destroy: no stack but CDKToolkit; {counted} resources of "
        f"{len(_exists_checks(aws))} types checked gone ({len(result.leftovers)} left); not checked "
        f"by type: {', '.join(sorted(unchecked)) or 'none'}"
    )


def remove_bootstrap(aws: Aws, result: Result) -> None:
    """Delete CDKToolkit as a user would (there is no `cdk unbootstrap`): empty its repository, delete the
    stack, and report what it retains (the staging bucket has DeletionPolicy Retain, as on AWS)."""
    cloudformation, ecr, s3 = aws.client("cloudformation"), aws.client("ecr"), aws.client("s3")
    summaries = cloudformation.list_stack_resources(StackName="CDKToolkit")["StackResourceSummaries"]
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in summaries}
    repository = physical.get("ContainerAssetsRepository")
    if repository:
        images = ecr.list_images(repositoryName=repository)["imageIds"]
        if images:
            ecr.batch_delete_image(repositoryName=repository, imageIds=images)
    cloudformation.delete_stack(StackName="CDKToolkit")
    live = [
        s["StackName"] for s in cloudformation.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"
    ]
    if live:
        result.problems.append(f"stacks left after deleting CDKToolkit: {live}")
    bucket = physical.get("StagingBucket")
    retained = []
    if bucket:
        try:
            s3.head_bucket(Bucket=bucket)
            retained.append(f"bucket {bucket} (DeletionPolicy Retain)")
            # what a user does next: empty and delete it
            versions = s3.list_object_versions(Bucket=bucket)
            objects = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in (versions.get("Versions") or []) + (versions.get("DeleteMarkers") or [])
            ]
            if objects:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
            s3.delete_bucket(Bucket=bucket)
        except Exception as exc:  # reported
            if "404" not in str(exc) and "Not Found" not in str(exc):
                result.problems.append(f"bootstrap bucket {bucket}: {exc}")
    result.checks.append(
        "CDKToolkit deleted; retained by its template and removed by hand: " + (", ".join(retained) or "nothing")
    )


# ----------------------------------------------------------------------------- the rehearsal


@dataclass
class Run:
    """What the steps of one rehearsal share: the scratch directory, the emulator's client, the config copy,
    and what each step leaves for the next (the release, the published images, the assembly deployed last)."""

    workdir: Path
    clock: Clock
    result: Result
    aws: Aws
    env: dict[str, str]  # the CLI's environment, pointed at the emulator
    base_env: dict[str, str]  # without AWS credentials: synth reads no account
    config_dir: Path
    account: str
    region: str
    release_manifest: dict = field(default_factory=dict)
    published: dict[str, dict] = field(default_factory=dict)  # release N's images by model
    cdk_out: Path | None = None  # the assembly deployed last
    stacks: list[StackArtifact] = field(default_factory=list)  # its stacks
    deployed: dict = field(default_factory=dict)  # stack -> logical id -> (type, physical id)
    outputs_by_stack: dict[str, dict[str, str]] = field(default_factory=dict)
    all_resources: dict = field(default_factory=dict)  # every resource the stacks ever had
    live: day_two.LiveState | None = None  # what day two set, as ECS and autoscaling would

    def synth_pinned(self, name: str) -> tuple[Path, list[StackArtifact]]:
        cdk_out = self.workdir / name
        code, output = run(
            [
                "cdk",
                "synth",
                "-q",
                "-c",
                f"environments={ENV}",
                "-c",
                f"inferstack:config-dir={self.config_dir}",
                "-o",
                str(cdk_out),
            ],
            env=self.base_env,
            timeout=self.clock.left(SYNTH_TIMEOUT_S),
        )
        _require(code, output, f"cdk synth ({name})")
        stacks = stacks_of(cdk_out)
        tools = publish_tool_images(self.aws, cdk_out, stacks)  # refuses any other image asset
        if tools:
            self.result.checks.append(
                f"the load-test image, built from the commit (not pinned), published as "
                f"cdk-assets would: {', '.join(tools)}"
            )
        return cdk_out, stacks

    def deploy(self, cdk_out: Path, stacks: list[StackArtifact], pinned: dict[str, dict], log_name: str):
        code, output = run(
            ["cdk", "deploy", "--app", str(cdk_out), f"{ENV}/*", "--require-approval", "never", "--progress", "events"],
            env=self.env,
            timeout=self.clock.left(DEPLOY_TIMEOUT_S),
        )
        (self.workdir / log_name).write_text(output)
        _require(code, output, f"cdk deploy ({log_name})")
        deployed = check_stacks(self.aws, stacks, self.result)
        if self.result.problems:
            raise RehearsalFailed("deployed stacks do not match their templates: " + "; ".join(self.result.problems))
        cloudformation = self.aws.client("cloudformation")
        outputs = {
            st.stack_name: {
                o["OutputKey"]: o["OutputValue"]
                for o in cloudformation.describe_stacks(StackName=st.stack_name)["Stacks"][0].get("Outputs") or []
            }
            for st in stacks
        }
        check_pinned_images(self.aws, pinned, outputs, self.result)
        return deployed, outputs


# ----------------------------------------------------------------------------- the steps, in order
# Each takes the run, does its part, and returns the line the report shows beside the step's name; a step that
# raises is reported failed with the exception's first line, and ends the rehearsal.


def bootstrap_and_release(r: Run) -> str:
    # Bootstrap (mostly waiting on the CLI) runs beside the first synth (CPU), each in its own process.
    bootstrap = subprocess.Popen(
        ["cdk", "bootstrap", f"aws://{r.account}/{r.region}"],
        cwd=ROOT,
        env=r.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        code, output = run(
            [
                "cdk",
                "synth",
                "-q",
                "-c",
                f"environments={ENV}",
                "-c",
                f"inferstack:config-dir={r.config_dir}",
                "-o",
                str(r.workdir / "cdk.out.release"),
            ],
            env=r.base_env,
            timeout=r.clock.left(SYNTH_TIMEOUT_S),
        )
        _require(code, output, "cdk synth (release)")
        code, output = run(
            [
                sys.executable,
                "-m",
                "inferstack",
                "release",
                "--cdk-out",
                str(r.workdir / "cdk.out.release"),
                "--out",
                str(r.workdir / "release.json"),
                "--config-dir",
                str(r.config_dir),
            ],
            env=r.base_env,
            timeout=r.clock.left(TOOL_TIMEOUT_S),
        )
        _require(code, output, "inferstack release")
        try:
            boot_output, _ = bootstrap.communicate(timeout=r.clock.left(BOOTSTRAP_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            raise RehearsalFailed(f"cdk bootstrap: no result after {BOOTSTRAP_TIMEOUT_S} s") from None
        _require(bootstrap.returncode, boot_output, "cdk bootstrap")
    finally:
        _kill_group(bootstrap)
    toolkit = r.aws.client("cloudformation").describe_stacks(StackName="CDKToolkit")["Stacks"][0]
    toolkit_outputs = {o["OutputKey"] for o in toolkit.get("Outputs") or []}
    if toolkit["StackStatus"] != "CREATE_COMPLETE" or "BootstrapVersion" not in toolkit_outputs:
        raise RehearsalFailed(f"CDKToolkit: {toolkit['StackStatus']}, outputs {sorted(toolkit_outputs)}")
    r.release_manifest = json.loads((r.workdir / "release.json").read_text())
    return f"CDKToolkit CREATE_COMPLETE with {len(toolkit_outputs)} outputs"


def publish_and_pin(r: Run) -> str:
    r.published = publish_images(r.aws, r.release_manifest, "N")
    if not r.published:
        raise RehearsalFailed("the release builds no image for dev")
    point_environments_at_pins(r.config_dir)
    pin_dev(r.config_dir, r.published, r.release_manifest)
    return ", ".join(f"{m}@{p['digest'][:19]}" for m, p in sorted(r.published.items()))


def synth_pinned(r: Run) -> str:
    r.cdk_out, r.stacks = r.synth_pinned("cdk.out")
    return f"{len(r.stacks)} stacks, no image asset"


def deploy(r: Run) -> str:
    from rehearsal import moto_patches

    result, stacks = r.result, r.stacks
    r.deployed, r.outputs_by_stack = r.deploy(r.cdk_out, stacks, r.published, "deploy.log")
    r.all_resources = dict(r.deployed)
    in_process = (moto_patches.LIVE_VALUE, moto_patches.SCALING_HANDOVER)  # patches run their handlers
    result.custom_resources_not_run = sorted(
        f"{st.stack_name}/{k} ({res['Type']})"
        for st in stacks
        for k, res in st.template.get("Resources", {}).items()
        if (res["Type"].startswith("Custom::") or res["Type"] == "AWS::CloudFormation::CustomResource")
        and res["Type"] not in in_process
    )
    readers, handovers = (
        sum(res["Type"] == kind for st in stacks for res in st.template.get("Resources", {}).values())
        for kind in in_process
    )
    result.checks.append(
        f"{readers} deploy-time readers (Custom::LiveValue) and {handovers} scaling handovers "
        f"(Custom::ScalingHandover) ran their own functions in the emulator (patches "
        f"live-values, scaling-handover)"
    )
    check_load_test(r.aws, r.outputs_by_stack, r.config_dir, result)
    if any(res["Type"] == "AWS::ECS::Service" for st in stacks for res in st.template.get("Resources", {}).values()):
        result.not_run.append(
            "ECS deployments: moto 5.2.5 models no DeploymentConfiguration (strategy ROLLING / BLUE_GREEN / "
            "LINEAR / CANARY, bake times, circuit breaker, deployment alarms) and runs no deployment, so no "
            "rollout, traffic shift or rollback happened; the services keep the target groups, alternate "
            "target groups and production rules they name (patch ecs-service-load-balancers); the day-two "
            "steps move the production rules the way a completed blue/green deployment leaves them"
        )
    return f"{len(stacks)} stacks checked against their templates"


def smoke(r: Run) -> str:
    return smoke_each(r.aws, r.env, r.config_dir, r.clock, r.result)


def promote(r: Run) -> str:
    result, clock, env = r.result, r.clock, r.env
    args = [
        sys.executable,
        "-m",
        "inferstack",
        "promote",
        "--from",
        ENV,
        "--to",
        PROMOTE_TO,
        "--manifest",
        str(r.workdir / "release.json"),
        "--config-dir",
        str(r.config_dir),
    ]
    # dev runs load tests in this config, so the gate applies: dev's results bucket (its LoadTest stack's)
    # holds no run of these images, and promote refuses before it copies anything.
    code, output = run(args, env=env, timeout=clock.left(TOOL_TIMEOUT_S))
    gate = [line for line in output.splitlines() if "load test" in line]
    result.tool_lines["promote (load test gate)"] = gate[-3:]
    if code != 1 or not any(f"no passing load test in {ENV} of the image promoted" in line for line in gate):
        result.problems.append(
            f"promote without load tests: exit {code}, expected the gate's refusal (exit 1): "
            f"{gate[-3:] or output.splitlines()[-3:]}"
        )
    else:
        result.checks.append(
            f"promote's load test gate refused: no run of the promoted images in {ENV}'s "
            f"results bucket (read through the deployed LoadTest stack's output)"
        )
    args.append("--skip-load-test")  # the rest of the path: the gate skipped, as the pin then records
    code, output = run(args, env=env, timeout=clock.left(TOOL_TIMEOUT_S))
    lines = [line for line in output.splitlines() if line.strip()]
    result.tool_lines["promote (dry run)"] = lines
    from inferstack.config import loader

    units = {u.name for u in loader.load(r.config_dir, releases=False).image_units(PROMOTE_TO)}
    planned = {line.split(":", 1)[0] for line in lines if line.endswith(("(copy)", "(exists)"))}
    if code != 0 or planned != units:
        result.problems.append(
            f"promote dry run: exit {code}, plans {sorted(planned)}, {PROMOTE_TO}'s image "
            f"units {sorted(units)}: {lines[-5:]}"
        )
    code_apply, output = run(
        [*args, "--apply"], env={**env, "AWS_MAX_ATTEMPTS": "1"}, timeout=clock.left(TOOL_TIMEOUT_S)
    )
    lines = [line for line in output.splitlines() if line.strip()]
    result.tool_lines["promote --apply"] = lines[-3:]
    if code_apply == 0:
        result.checks.append(f"promote --apply copied {len(units)} images and wrote the staging pin")
    else:
        result.not_run.append(
            "promote --apply: moto 5.2.5 does not implement ECR GetDownloadUrlForLayer (and keeps only "
            "the size of an uploaded layer, not its bytes), so the layer copy cannot run; the dry run "
            "(outputs -> ECS service/task definition or SageMaker endpoint/config/model -> ECR digest -> "
            "release membership -> staging repository through the assumed deploy role) ran in full"
        )
    return f"dry run exit {code}, --apply exit {code_apply}"


def day_two_shift_and_scale(r: Run) -> str:
    live = r.live = day_two.shift_and_scale(r.aws, r.outputs_by_stack)
    # Registered here, not at the first deploy: nothing before release N+1 changes an instance type.
    live.targets = day_two.register_variant_targets(r.aws, {st.stack_name: st.template for st in r.stacks})
    return (
        f"{len(live.rules)} production rules at 0/100, {len(live.tasks)} services at "
        f"{day_two.SCALED_TASKS} tasks, copies {dict(sorted(live.copies.items()))}, "
        f"variant targets registered: {len(live.targets)}"
    )


def next_release(r: Run) -> str:
    result, aws = r.result, r.aws
    published_next = publish_images(aws, r.release_manifest, "N+1")
    result.config_changes += day_two.change_for_next_release(r.config_dir)
    pin_dev(r.config_dir, published_next, r.release_manifest)
    r.cdk_out, r.stacks = r.synth_pinned("cdk.out.next")
    r.deployed, r.outputs_by_stack = r.deploy(r.cdk_out, r.stacks, published_next, "deploy-next.log")
    r.all_resources.update(r.deployed)
    checks, problems = day_two.check_kept(aws, r.live, "release N+1")
    checks.append(check_config_change(aws, r.outputs_by_stack, result))
    if f"{ENV}-{day_two.RETYPED_MODEL}" in r.outputs_by_stack:
        checks.append(check_instance_type_change(aws, r.outputs_by_stack, r.live, result))
    else:
        result.not_run.append(
            f"an instance-type change of an autoscaled dedicated endpoint in one deploy: "
            f"{day_two.RETYPED_MODEL}, the endpoint release N+1 retypes, is a sample model (--add-models); "
            f"tests/stacks/test_instance_type_change.py deploys that change on moto"
        )
    result.checks += checks
    result.problems += problems
    return f"{len(r.stacks)} stacks updated; {len(checks)} day-two checks, {len(problems)} failed"


def rollback(r: Run) -> str:
    result, clock, env = r.result, r.clock, r.env
    args = [sys.executable, "-m", "inferstack", "rollback", "--env", ENV, "--config-dir", str(r.config_dir)]
    code, output = run(args, env=env, timeout=clock.left(TOOL_TIMEOUT_S))
    result.tool_lines["rollback (dry run)"] = [line for line in output.splitlines() if line.strip()]
    _require(code, output, "inferstack rollback (dry run)")
    code, output = run([*args, "--apply"], env=env, timeout=clock.left(TOOL_TIMEOUT_S))
    result.tool_lines["rollback --apply"] = [line for line in output.splitlines() if line.strip()][-3:]
    _require(code, output, "inferstack rollback --apply")
    r.cdk_out, r.stacks = r.synth_pinned("cdk.out.rollback")
    r.deployed, r.outputs_by_stack = r.deploy(r.cdk_out, r.stacks, r.published, "deploy-rollback.log")
    r.all_resources.update(r.deployed)
    checks, problems = day_two.check_kept(r.aws, r.live, "rollback")
    result.checks += checks
    result.problems += problems
    return f"release N's digests running again in {len(r.published)} image units"


def retire(r: Run) -> str:
    import yaml

    result, retired_model, retired_member = r.result, day_two.RETIRED_MODEL, day_two.RETIRED_FLEET_MEMBER
    retired_stack, fleet_stack = f"{ENV}-{retired_model}", f"{ENV}-{day_two.CHANGED_FLEET}"
    before = {name: dict(logical) for name, logical in r.deployed.items()}
    fleet_url = r.outputs_by_stack[fleet_stack]["Url"]
    member_port = yaml.safe_load((r.config_dir / f"{retired_member}.yaml").read_text())["serving"].get("port", 8080)
    result.config_changes.append(day_two.retire(r.config_dir, retired_model))
    result.config_changes.append(day_two.retire(r.config_dir, retired_member))
    retired_out, retired_stacks = r.synth_pinned("cdk.out.retired")
    if any(st.stack_name == retired_stack for st in retired_stacks):
        raise RehearsalFailed(f"{retired_stack} is still synthesized after its model was retired")
    code, output = run(
        ["cdk", "destroy", "--app", str(r.cdk_out), f"{ENV}/{retired_model}", "--force"],
        env=r.env,
        timeout=r.clock.left(DESTROY_TIMEOUT_S),
    )
    _require(code, output, f"cdk destroy {ENV}/{retired_model}")
    deployed, r.outputs_by_stack = r.deploy(
        retired_out, retired_stacks, {m: p for m, p in r.published.items() if m != retired_model}, "deploy-retired.log"
    )
    r.deployed = deployed
    check_retired(
        r.aws, before, deployed, retired_stack, result, members_left={fleet_stack: (retired_member, member_port)}
    )
    if r.outputs_by_stack[fleet_stack]["Url"] != fleet_url:
        result.problems.append(
            f"retire: {fleet_stack}'s Url moved: {fleet_url} -> {r.outputs_by_stack[fleet_stack]['Url']}"
        )
    removed_rules = {
        physical
        for logical, (kind, physical) in before[fleet_stack].items()
        if kind == "AWS::ElasticLoadBalancingV2::ListenerRule" and logical not in deployed[fleet_stack]
    }
    checks, problems = day_two.check_kept(
        r.aws,
        r.live,
        f"retiring {retired_model} and {retired_member}",
        gone=lambda name: name == retired_stack or name in removed_rules,
    )
    result.checks += checks
    result.problems += problems
    r.cdk_out, r.stacks = retired_out, retired_stacks
    return (
        f"{retired_stack} gone with its resources; {fleet_stack} without {retired_member}, at the same "
        f"Url; {len(retired_stacks)} stacks unchanged otherwise"
    )


def destroy(r: Run) -> str:
    # `--all` selects the top-level stacks only, and every stack here is in a Stage (nested assembly):
    # `cdk destroy --all` answers "No stack found in the main cloud assembly". Name the stage's stacks.
    code, output = run(
        ["cdk", "destroy", "--app", str(r.cdk_out), f"{ENV}/*", "--force"],
        env=r.env,
        timeout=r.clock.left(DESTROY_TIMEOUT_S),
    )
    (r.workdir / "destroy.log").write_text(output)
    _require(code, output, "cdk destroy")
    check_destroyed(r.aws, r.all_resources, r.result)
    neuron = [
        name
        for name, logical in r.all_resources.items()
        if any(t == "AWS::AutoScaling::AutoScalingGroup" for t, _ in logical.values())
    ]
    r.result.neuron_deletion = (
        f"{', '.join(neuron)}: deleted at once. moto's CloudFormation does not model "
        "AWS::ECS::CapacityProvider / ClusterCapacityProviderAssociations (nothing is created, so "
        "managed termination protection never applies), and it deletes the Auto Scaling group without "
        "waiting for instances to drain: the hang of aws-cdk issue 18179 cannot show here"
    )
    return f"{len(r.stacks)} stacks destroyed"


def delete_bootstrap(r: Run) -> str:
    remove_bootstrap(r.aws, r.result)
    return "no stack left"


@dataclass(frozen=True)
class RehearsalStep:
    name: str
    run: Callable[[Run], str]  # returns the step's detail line
    # When set, problems found so far end the rehearsal after this step: "<count> <stop_on_problems> failed".
    stop_on_problems: str | None = None


STEPS = (
    RehearsalStep("cdk bootstrap + cdk synth dev (release) + inferstack release", bootstrap_and_release),
    RehearsalStep("publish dev's images (ECR API, synthetic) and pin them", publish_and_pin),
    RehearsalStep("cdk synth dev (pinned)", synth_pinned),
    RehearsalStep(f"cdk deploy '{ENV}/*'", deploy),
    RehearsalStep("inferstack smoke --env dev, one model at a time", smoke),
    RehearsalStep(f"inferstack promote --from {ENV} --to {PROMOTE_TO} (gate, dry run, --apply)", promote),
    # ------------------------------------------------------------------ day two
    RehearsalStep(
        "day two: production moved to the alternate target groups, counts scaled, variants registered as "
        "scalable targets (ELB, ECS, SageMaker, Application Auto Scaling APIs)",
        day_two_shift_and_scale,
    ),
    RehearsalStep(
        "release N+1: new digests, batch size, fleet capacity and an instance type changed; cdk deploy", next_release
    ),
    RehearsalStep(f"inferstack rollback --env {ENV} (dry run, --apply); cdk deploy", rollback),
    RehearsalStep(
        f"retire {day_two.RETIRED_MODEL}, and {day_two.RETIRED_FLEET_MEMBER} (the reordered "
        f"{day_two.CHANGED_FLEET}'s first): cdk destroy {day_two.RETIRED_MODEL}'s stack, then cdk deploy "
        f"without them",
        retire,
        stop_on_problems="day-two check(s)",
    ),
    RehearsalStep(f"cdk destroy '{ENV}/*' --force", destroy),
    RehearsalStep("delete CDKToolkit", delete_bootstrap, stop_on_problems="check(s)"),
)


def rehearse(
    workdir: Path,
    clock: Clock,
    result: Result,
    log: Callable[[str], None],
    ci: bool | None = None,
    add_models: bool = False,
) -> None:
    from rehearsal import aws_rules, moto_patches

    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_", "CDK_"))}
    base_env.update(
        {
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "CDK_HOME": str(workdir / "cdk-home"),
            "PATH": os.pathsep.join(
                [str(ROOT / "node_modules" / ".bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
            ),
        }
    )
    config_dir = workdir / "model_configs"
    shutil.copytree(ROOT / "model_configs", config_dir, ignore=shutil.ignore_patterns("releases"))
    if add_models:
        result.config_changes += [f"added {m}" for m in day_two.add_sample_models(config_dir)]
    result.config_changes.append(day_two.enable_load_test(config_dir, ENV))
    import yaml

    environments = yaml.safe_load((config_dir / "environments.yaml").read_text())["environments"]
    account, region = str(environments[ENV]["account"]), environments[ENV]["region"]

    with emulator(workdir, clock) as endpoint:
        aws = Aws(endpoint, account, region)
        r = Run(
            workdir=workdir,
            clock=clock,
            result=result,
            aws=aws,
            env=aws.env(workdir, ci),
            base_env=base_env,
            config_dir=config_dir,
            account=account,
            region=region,
        )
        result.workarounds = [f"{p.name}: {p.defect}" for p in moto_patches.PATCHES]
        result.rules = [f"{rule.name}: {rule.defect}" for rule in aws_rules.RULES]
        for step in STEPS:
            with _StepTimer(step.name, result, log) as timed:
                timed.detail = step.run(r)
            if step.stop_on_problems and result.problems:
                raise RehearsalFailed(f"{len(result.problems)} {step.stop_on_problems} failed")


def _require(code: int, output: str, what: str) -> None:
    if code != 0:
        raise RehearsalFailed(f"{what}: exit {code}:\n" + "\n".join(output.splitlines()[-25:]))


class _StepTimer:
    def __init__(self, name: str, result: Result, log: Callable[[str], None]) -> None:
        self.step = Step(name, 0.0, True)
        self.result, self.log = result, log

    def __enter__(self) -> Step:
        self.start = time.monotonic()
        self.log(f"-> {self.step.name}")
        return self.step

    def __exit__(self, kind, exc, tb) -> bool:
        self.step.seconds = time.monotonic() - self.start
        if exc is not None:
            self.step.ok = False
            self.step.detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        self.result.steps.append(self.step)
        self.log(f"   {'ok' if self.step.ok else 'FAILED'} in {self.step.seconds:.1f} s: {self.step.detail}")
        return False


def report(result: Result) -> str:
    lines = [
        f"CLI deploy rehearsal of {ENV} against moto (patched): {'PASSED' if result.ok else 'FAILED'} "
        f"in {result.total_seconds:.1f} s",
        "steps:",
    ]
    lines += [f"  {'ok ' if s.ok else 'FAIL'} {s.seconds:6.1f} s  {s.name}: {s.detail}" for s in result.steps]
    if result.problems:
        lines.append("failed checks:")
        lines += [f"  {p}" for p in result.problems]
    if result.config_changes:
        lines.append("config changes made by the rehearsal (in its copy of model_configs):")
        lines += [f"  {c}" for c in result.config_changes]
    lines.append("checked:")
    lines += [f"  {c}" for c in result.checks]
    lines.append("emulator workarounds applied (rehearsal/moto_patches.py):")
    lines += [f"  {w}" for w in result.workarounds]
    lines.append("AWS rules the emulator enforces as an account would (rehearsal/aws_rules.py):")
    lines += [f"  {r}" for r in result.rules]
    if result.custom_resources_not_run:
        lines.append("custom resources marked created without running their Lambda (no Docker):")
        lines += [f"  {c}" for c in result.custom_resources_not_run]
    lines.append(
        "resource types in the templates moto's CloudFormation does not model (nothing created, nothing "
        "checked; what they keep across an update is proven on the templates, "
        "tests/constructs/test_live_values.py):"
    )
    lines += [f"  {k} (in {', '.join(v)})" for k, v in sorted(result.unmodeled.items())]
    if result.not_run:
        lines.append("not rehearsed here:")
        lines += [f"  {n}" for n in result.not_run]
    for tool, tool_lines in result.tool_lines.items():
        lines.append(f"{tool}:")
        lines += [f"  {line}" for line in tool_lines]
    if result.neuron_deletion:
        lines.append(f"Neuron stack deletion: {result.neuron_deletion}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="overall limit, seconds")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="work in DIR and keep it (logs, assemblies, pin) instead of a removed temp dir",
    )
    parser.add_argument(
        "--add-models",
        action="store_true",
        help="first add one model of each kind under new names (as a team adds its own)",
    )
    args = parser.parse_args(argv)
    result = rehearse_once(
        timeout=args.timeout,
        keep=args.keep,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        add_models=args.add_models,
    )
    print(report(result))
    return 0 if result.ok else 1


def rehearse_once(
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    keep: Path | None = None,
    log: Callable[[str], None] = lambda _m: None,
    ci: bool | None = None,
    add_models: bool = False,
) -> Result:
    """`add_models`: add day_two.SAMPLE_MODELS (one model of each kind) to the config copy first."""
    clock = Clock(timeout)
    result = Result()
    workdir = keep or Path(tempfile.mkdtemp(prefix="inferstack-rehearsal-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        rehearse(workdir, clock, result, log, ci, add_models)
    except RehearsalFailed as exc:
        if not result.problems or str(exc) not in result.problems:
            result.problems.append(str(exc))
    except Exception as exc:  # an unexpected error is a failed rehearsal, reported like one
        result.problems.append(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    finally:
        result.total_seconds = time.monotonic() - clock.start
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
