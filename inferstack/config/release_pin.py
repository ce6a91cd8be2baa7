"""The pin file `inferstack promote` writes and an environment's `release: {manifest: ...}` names: one
image digest per image unit (a model with its own stack, or a neuron-cores fleet, whose one image serves all
its members: keyed by the fleet's name), in the environment's own account and region, so staging and prod
deploy the exact images dev ran. Validated when the config loads; every problem names the file and key."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from inferstack.schema.base import Frozen, Name
from inferstack.schema.environments import Environment

PIN_FORMAT = "inferstack-pin/1"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
# Private ECR only: the pin is what promote copied into the environment's own registry.
REPOSITORY_URI_PATTERN = (
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?"
    r"/(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)$"
)
Finding = tuple[str, str]  # (key path, message)
# A pin holds one image per model (~300 bytes each); 1 MiB is thousands of models, read in milliseconds.
MAX_PIN_BYTES = 1024 * 1024


class PinnedImage(Frozen):
    """A serving image by digest. Typed so constructs take it instead of a string they would parse."""

    repository_uri: str = Field(
        pattern=REPOSITORY_URI_PATTERN, description="<account>.dkr.ecr.<region>.amazonaws.com/<repository>"
    )
    digest: str = Field(pattern=DIGEST_PATTERN)
    source_image: str | None = Field(None, description="what the source environment ran (provenance)")
    tag: str | None = Field(None, description="tag promote gave the copy (the CDK asset hash when known)")

    def _part(self, group: str) -> str:
        match = re.fullmatch(REPOSITORY_URI_PATTERN, self.repository_uri)
        assert match is not None  # the field pattern guarantees it
        return match.group(group)

    @property
    def account(self) -> str:
        return self._part("account")

    @property
    def region(self) -> str:
        return self._part("region")

    @property
    def repository_name(self) -> str:
        return self._part("name")

    @property
    def uri(self) -> str:
        return f"{self.repository_uri}@{self.digest}"


class ReleaseIdentity(Frozen):
    """Which release the pinned images belong to, copied from the release manifest when promote had one."""

    commit: str | None = None
    config_sha256: str | None = None
    manifest_sha256: str | None = None


class LoadTestEvidence(Frozen):
    """A model's newest load test of the promoted image in the source environment (load_test_gate.py)."""

    location: str = Field(min_length=1, description="s3:// of the run's result.json")
    verdict: Literal["pass", "fail", "invalid"]
    finished: str
    achieved_rps: float = Field(ge=0)
    p99_ms: float | None = Field(None, ge=0)


class LoadTestRecord(Frozen):
    """Promotion's load test gate, as it was when the pin was written: the evidence it accepted, or that
    `--skip-load-test` skipped it (reviewers see it in the pin's diff and its history)."""

    gate: str = Field(min_length=1, description="why the gate applied to this promotion")
    skipped: bool = False
    results: dict[Name, LoadTestEvidence] = Field(default_factory=dict)


class ReleasePin(Frozen):
    format: Literal["inferstack-pin/1"]
    environment: Name
    promoted_from: Name
    release: ReleaseIdentity = ReleaseIdentity()
    load_test: LoadTestRecord | None = Field(
        None, description="the load test gate's record; absent where it did not apply"
    )
    images: dict[Name, PinnedImage]  # image unit (model or neuron-cores fleet) -> its image

    def image_for(self, unit: str) -> PinnedImage | None:
        return self.images.get(unit)


def read(path: Path) -> tuple[ReleasePin | None, list[tuple[str, int | None, str]]]:
    """The pin at `path`, or the (key, line, message) problems that keep it from loading."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_PIN_BYTES + 1)
        if len(raw) > MAX_PIN_BYTES:
            return None, [("", None, f"file is larger than {MAX_PIN_BYTES} bytes (the limit for a pin file)")]
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return None, [("", None, "file not found; run `python -m inferstack promote ... --apply` to write it")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [("", None, f"cannot read: {getattr(exc, 'strerror', None) or exc}")]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [("", exc.lineno, f"not valid JSON: {exc.msg}")]
    except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, arrays nested thousands deep
        return None, [("", None, f"not valid JSON: {' '.join(str(exc).split())[:200]}")]
    try:
        return ReleasePin.model_validate(data), []
    except ValidationError as exc:
        problems: list[tuple[str, int | None, str]] = []
        for error in exc.errors(include_url=False):
            key = ".".join(str(part) for part in error["loc"] if part != "[key]")
            message = {"missing": "required field is missing", "extra_forbidden": "unknown key"}.get(
                error["type"], error["msg"]
            )
            problems.append((key, None, message))
        return None, problems


def check(pin: ReleasePin, env_name: str, environment: Environment, units: Iterable[str]) -> Iterator[Finding]:
    """Rules that need the environment and its image units (loader.image_unit_names: every model with a stack of
    its own and every neuron-cores fleet): the pin must be for this environment, cover every unit and nothing
    else, and point into the environment's own registry."""
    if pin.environment != env_name:
        yield "environment", f"pin is for environment {pin.environment!r}, but {env_name} names it"
    wanted = sorted(units)
    missing = [m for m in wanted if m not in pin.images]
    if missing:
        yield (
            "images",
            (
                f"no pinned image for {', '.join(missing)}; promote again to cover every dedicated "
                f"model and neuron-cores fleet of {env_name}"
            ),
        )
    for name, image in sorted(pin.images.items()):
        if name not in wanted:
            yield (
                f"images.{name}",
                (
                    f"unknown model or fleet (a neuron-cores fleet's members are pinned by the "
                    f"fleet's name); known: {', '.join(wanted)}"
                ),
            )
        elif (image.account, image.region) != (environment.account, environment.region):
            yield (
                f"images.{name}.repository_uri",
                (
                    f"image is in {image.account}/{image.region}, but {env_name} deploys to "
                    f"{environment.account}/{environment.region}; promote copies it there"
                ),
            )


def dump(pin: ReleasePin) -> str:
    """Deterministic JSON: sorted keys, no timestamps, so an unchanged promotion rewrites identical bytes."""
    return json.dumps(pin.model_dump(mode="json", exclude_none=True), indent=2, sort_keys=True) + "\n"
