"""`python -m inferstack promote --from dev --to staging [--apply] [--manifest FILE]`: move the images a
source environment runs into the target environment's registry, by digest, and write the target's pin
file, so its next deploy runs exactly those images. Dry run by default: prints the plan, changes nothing.
A pin written that differs from the last one is recorded in the pin history (config/pin_history.py), which
`rollback` reads.

What runs is read from the source, not from a build: stack outputs -> ECS service -> task definition
image, or SageMaker endpoint -> endpoint config -> model -> container image (for a model on a fleet's
shared endpoint: its inference component -> model -> container image); tags are resolved to digests in
ECR. With --manifest, each image must belong to that release. One image per image unit
(Project.image_units): a model with a stack of its own, or a neuron-cores fleet, whose one image serves all its
members and is copied, pinned and named as the fleet."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inferstack import atomic_write
from inferstack.aws import aws_sessions, ecr_images, stack_outputs
from inferstack.command_line import DEFAULT_CONFIG_DIR, Failure, UsageError
from inferstack.config import Project, loader, pin_history
from inferstack.config.release_pin import PIN_FORMAT, LoadTestRecord, PinnedImage, ReleaseIdentity, ReleasePin, dump
from inferstack.delivery import load_test_gate, release

if TYPE_CHECKING:
    import boto3

# Promoted images live in one repository per image unit in each target account: inferstack/<model or fleet>.
REPOSITORY_PREFIX = "inferstack"


class PromoteError(Failure):
    """The source does not run what is expected, or an image cannot be found or copied; exit 1."""


@dataclass(frozen=True)
class Step:
    model: str  # the image unit: a model, or a neuron-cores fleet
    source: ecr_images.ResolvedImage
    target_repository: str
    target_repository_uri: str
    tag: str | None
    action: str  # "copy" or "exists"

    def line(self) -> str:
        tag = f" as :{self.tag}" if self.tag and self.action == "copy" else ""
        return (
            f"{self.model}: {self.source.ref.repository_uri}@{self.source.digest} -> "
            f"{self.target_repository_uri}{tag} ({self.action})"
        )


def _check_release(
    model: str, source_env: str, image: ecr_images.ResolvedImage, manifest: dict, manifest_path: Path
) -> str | None:
    """The release's tag for this image (the CDK asset hash), or PromoteError when the source runs
    something the release did not build. `model`: the image unit's name (its stack's id)."""
    candidates = release.model_images(manifest, model)
    if not candidates:
        raise PromoteError(f"{model}: release manifest {manifest_path} builds no image for this stack")
    for candidate in candidates:
        if candidate.get("digest") == image.digest or (
            not candidate.get("digest") and candidate.get("tag") in image.tags
        ):
            return candidate.get("tag")
    expected = ", ".join(c.get("digest") or f"tag {c.get('tag')}" for c in candidates)
    raise PromoteError(
        f"{model}: {source_env} runs {image.ref.repository_uri}@{image.digest} "
        f"(tags: {', '.join(image.tags) or 'none'}), not the image of release {manifest_path} "
        f"({expected})"
    )


def plan(
    project: Project,
    source_env: str,
    target_env: str,
    sessions: dict[str, boto3.Session],
    manifest: dict | None = None,
    manifest_path: Path | None = None,
) -> list[Step]:
    target = project.environments[target_env]
    suffix = "amazonaws.com.cn" if target.region.startswith("cn-") else "amazonaws.com"
    target_ecr = sessions[target_env].client("ecr")
    steps = []
    # The target's units: the pin must cover them (a neuron-cores fleet's are the same in every environment).
    for unit in project.image_units(target_env):
        try:
            reference = ecr_images.ImageRef.parse(ecr_images.running_image(sessions[source_env], source_env, unit))
            source_ecr = sessions[source_env].client("ecr", region_name=reference.region)
            image = ecr_images.resolve(source_ecr, reference)
        except (stack_outputs.StackNotFound, ecr_images.NotRunning) as exc:
            raise PromoteError(str(exc)) from None
        except ecr_images.ImageError as exc:
            raise PromoteError(f"{unit.name}: {exc}") from None
        tag = reference.tag
        if manifest is not None:
            assert manifest_path is not None
            tag = _check_release(unit.name, source_env, image, manifest, manifest_path) or tag
        repository = f"{REPOSITORY_PREFIX}/{unit.name}"
        exists = ecr_images.tags_of_digest(target_ecr, repository, image.digest) is not None
        if not exists and tag is not None:
            holder = ecr_images.digest_of_tag(target_ecr, repository, tag)
            if holder is not None and holder != image.digest:
                raise PromoteError(
                    f"{unit.name}: {target_env} repository {repository} already tags {tag} as "
                    f"{holder} (tags are immutable); the source runs {image.digest}"
                )
        steps.append(
            Step(
                unit.name,
                image,
                repository,
                f"{target.account}.dkr.ecr.{target.region}.{suffix}/{repository}",
                tag,
                "exists" if exists else "copy",
            )
        )
    return steps


def apply(steps: list[Step], source_session: boto3.Session, target_session: boto3.Session) -> None:
    target_ecr = target_session.client("ecr")
    for step in steps:
        if step.action != "copy":
            continue
        ecr_images.ensure_repository(target_ecr, step.target_repository)
        source_ecr = source_session.client("ecr", region_name=step.source.ref.region)
        ecr_images.copy(source_ecr, step.source.ref, step.source.digest, target_ecr, step.target_repository, step.tag)


def pin_for(
    steps: list[Step],
    source_env: str,
    target_env: str,
    identity: ReleaseIdentity,
    load_test: LoadTestRecord | None = None,
) -> ReleasePin:
    return ReleasePin(
        format=PIN_FORMAT,
        environment=target_env,
        promoted_from=source_env,
        release=identity,
        load_test=load_test,
        images={
            s.model: PinnedImage(
                repository_uri=s.target_repository_uri,
                digest=s.source.digest,
                source_image=f"{s.source.ref.repository_uri}@{s.source.digest}",
                tag=s.tag,
            )
            for s in steps
        },
    )


def run(args: argparse.Namespace) -> int:
    # Pins are not read: the target's may be stale or missing, which is what this command fixes.
    project = loader.load(args.config_dir, releases=False)
    for option, name in (("--from", args.source), ("--to", args.target)):
        if name not in project.environments:
            raise UsageError(f"{option}: unknown environment {name!r}; known: {', '.join(project.environments)}")
    if args.source == args.target:
        raise UsageError("--from and --to name the same environment")
    manifest, identity = None, ReleaseIdentity()
    if args.manifest is not None:
        try:
            manifest, manifest_sha = release.load(args.manifest)
        except release.ReleaseError as exc:
            raise UsageError(str(exc)) from None
        identity = ReleaseIdentity(
            commit=manifest.get("commit"), config_sha256=manifest.get("config_sha256"), manifest_sha256=manifest_sha
        )
    target = project.environments[args.target]
    pin_path = loader.pin_path(project.config_dir, target) or project.config_dir / "releases" / f"{args.target}.json"
    history = pin_history.history_path(pin_path, args.target)
    try:  # read first: a corrupt history fails the command before anything is copied or written
        entries = pin_history.read(history, args.target)
    except pin_history.HistoryError as exc:
        raise UsageError(str(exc)) from None
    sessions = {
        name: aws_sessions.session_for(name, project.environments[name], purpose="promote")
        for name in (args.source, args.target)
    }
    steps = plan(project, args.source, args.target, sessions, manifest, args.manifest)
    mode = "applying" if args.apply else f"dry run; --apply copies and writes {pin_path}"
    print(f"promote {args.source} -> {args.target} ({mode})")
    for step in steps:
        print(step.line())
    load_test = gate(project, args, steps, sessions[args.source])
    if not args.apply:
        return 0
    try:
        pin_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PromoteError(f"{pin_path.parent}: cannot create: {exc.strerror or exc}") from None
    apply(steps, sessions[args.source], sessions[args.target])
    pin = pin_for(steps, args.source, args.target, identity, load_test)
    try:
        atomic_write.write_text(pin_path, dump(pin))
    except OSError as exc:
        raise PromoteError(f"{pin_path}: cannot write: {exc.strerror or exc}") from None
    # The history (`rollback` reads it) gains an entry when the pin changed; an unchanged re-run adds none.
    if not entries or entries[-1].pin != pin:
        try:
            pin_history.append(history, pin_history.new_entry(pin, cwd=project.config_dir, promoted_from=args.source))
        except pin_history.HistoryError as exc:
            raise PromoteError(f"{exc} (the pin was written; the history does not record it)") from None
    print(f"wrote {pin_path}")
    if target.release is None:
        print(loader.not_deployed_note(project.config_dir, args.target, pin_path))
    return 0


def gate(
    project: Project, args: argparse.Namespace, steps: list[Step], session: boto3.Session
) -> LoadTestRecord | None:
    """The load test gate (load_test_gate.py), before anything is copied: its lines, and PromoteError when a
    promoted model has no passing load test of its image in the source, unless --skip-load-test."""
    why = load_test_gate.required(project, args.source, args.target)
    if why is None:
        return None
    if args.skip_load_test:
        print(f"load test gate: SKIPPED (--skip-load-test, recorded in the pin); it applies because {why}")
        return load_test_gate.record(why, [], skipped=True)
    print(f"load test gate: {why}")
    try:
        findings = load_test_gate.evaluate(
            session, project, args.source, {step.model: step.source.digest for step in steps}
        )
    except load_test_gate.GateError as exc:
        raise PromoteError(f"load test gate: {exc}") from None
    for finding in findings:
        print(f"  {finding.line}")
    failed = sorted(f.model for f in findings if not f.passed)
    if failed:
        raise PromoteError(
            f"load test gate: no passing load test in {args.source} of the image promoted for "
            f"{', '.join(failed)}; run `python -m inferstack loadtest --env {args.source} --model M` "
            f"for each, or pass --skip-load-test (recorded in the pin)"
        )
    return load_test_gate.record(why, findings, skipped=False)


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "promote",
        help="copy what one environment runs into the next and pin it",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    cmd.add_argument("--from", dest="source", required=True, metavar="ENV", help="environment to read from")
    cmd.add_argument("--to", dest="target", required=True, metavar="ENV", help="environment to pin")
    cmd.add_argument("--apply", action="store_true", help="copy the images and write the pin (default: dry run)")
    cmd.add_argument("--manifest", type=Path, help="release manifest (from `release`) the images must belong to")
    cmd.add_argument(
        "--skip-load-test",
        action="store_true",
        help="promote without a passing load test in the source where the gate applies (into an "
        "environment behind an approval, or from one that runs load tests); recorded in the pin",
    )
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)
