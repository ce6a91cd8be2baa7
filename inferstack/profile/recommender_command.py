"""`inferstack profile --recommender`: the Inference Recommender job of a deployed Triton model, printed or
started, and its sample payload archive written."""

from __future__ import annotations

import datetime
import json

from inferstack import atomic_write
from inferstack.command_line import UsageError
from inferstack.loadtest import probes
from inferstack.profile import deployed, recommender
from inferstack.profile.errors import ProfileFailure
from inferstack.schema import instances, kinds


def split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run(args, project, model) -> int:
    if kinds.model_kind(model).hosting != "sagemaker":
        sagemaker = ", ".join(k.name for k in kinds.MODEL_KINDS.values() if k.hosting == "sagemaker")
        raise UsageError(
            f"--recommender: {model.name} is a {model.kind} model; Inference Recommender tests "
            f"SageMaker models ({sagemaker}): measure it with --target or in the environment"
        )
    if args.write_payload is not None:
        try:
            atomic_write.write_bytes(args.write_payload, recommender.payload_archive(probes.probe_for(model).body))
        except OSError as exc:
            raise UsageError(f"--write-payload {args.write_payload}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {args.write_payload}: upload it to S3 and pass its s3:// URL as --payload-url")
        if not args.recommender:
            return 0
    if not (args.print_request or args.apply):
        raise UsageError("--recommender: say --print-request (show the request) or --apply (start the job)")
    missing = [
        flag for flag, value in (("--role-arn", args.role_arn), ("--payload-url", args.payload_url)) if not value
    ]
    if missing:
        raise UsageError(f"--recommender needs {' and '.join(missing)}")
    types = split(args.instance_types) if args.instance_types else _default_types(model, args.env)
    for itype in types:
        instances.get(itype)  # unknown: a usage error listing the known ones
    fleet = project.fleet_of(model.name, args.env)
    if args.model_name is None and fleet is not None:
        raise UsageError(
            f"--recommender: in {args.env} {model.name} is an inference component on fleet "
            f"{fleet}'s endpoint, not a model of its own; use an environment where it has its "
            f"own endpoint, or name a SageMaker Model with --model-name"
        )
    session = None
    if args.model_name is None or args.apply:
        from inferstack.aws import aws_sessions

        session = aws_sessions.session_for(args.env, project.environments[args.env], purpose="profile")
    model_name = args.model_name or _deployed_model_name(session, model, args.env)
    name = args.job_name or recommender.job_name(model.name, args.env, datetime.datetime.now(datetime.UTC))
    try:
        request = recommender.build(
            model,
            args.env,
            model_name=model_name,
            role_arn=args.role_arn,
            instance_types=types,
            payload_url=args.payload_url,
            name=name,
        )
    except recommender.RequestInvalid as exc:
        raise UsageError(f"--recommender: the request breaks the SageMaker API's rules: {exc}") from None
    if args.print_request:
        print(json.dumps(request, indent=2))
    if args.apply:
        assert session is not None  # created above whenever --apply is given
        arn = _start(session.client("sagemaker"), request)
        print(
            f"started {arn}; when it is COMPLETED: aws sagemaker describe-inference-recommendations-job "
            f"--job-name {name} > {name}.json && python -m inferstack profile {model.name} --env {args.env} "
            f"--from-recommendations {name}.json"
        )
    return 0


def _default_types(model, env_name: str) -> list[str]:
    deployed = model.capacity_for(env_name).instance_type
    return [deployed] + sorted(t for t in model.throughput_profile if t.startswith("ml.") and t != deployed)


def _deployed_model_name(session, model, env_name: str) -> str:
    from inferstack.aws import aws_sessions

    try:
        return deployed.model_name(session.client("cloudformation"), session.client("sagemaker"), env_name, model.name)
    except deployed.NotDeployed as exc:
        raise ProfileFailure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None


def start(client, request: dict) -> str:
    """CreateInferenceRecommendationsJob; its ARN."""
    return client.create_inference_recommendations_job(**request)["JobArn"]


def _start(client, request: dict) -> str:
    from inferstack.aws import aws_sessions

    try:
        return start(client, request)
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None
