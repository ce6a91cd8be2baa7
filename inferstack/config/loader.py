"""Load `model_configs/` into a frozen `Project`, or raise one `ConfigError` listing every problem,
each naming its file, line and key path."""

from __future__ import annotations

import re
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from inferstack.config import architecture, checks, pipeline_checks, release_pin
from inferstack.config.problems import ConfigError, Problem
from inferstack.config.yaml_source import YamlDocument, YamlSyntaxError, parse
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment, EnvironmentsFile, PipelineSettings, is_production
from inferstack.schema.fleets import Fleet
from inferstack.schema.kinds import Model
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

ENVIRONMENTS_FILE = "environments.yaml"
SchemaT = typing.TypeVar("SchemaT", bound=BaseModel)  # the model _validate returns is the schema it was given


@dataclass(frozen=True)
class ImageUnit:
    """What one serving image is built for and deployed as in an environment: a model with a stack of its own,
    or a neuron-cores fleet, whose one stack and one image serve all its members. `name` is the stack's id
    (`<env>-<name>`) and the key of the unit's image in release manifests and pins."""

    name: str
    models: tuple[Model, ...]
    fleet: bool = False  # a neuron-cores fleet (its members' compile settings are all in the one image)

    @property
    def kind(self) -> kinds.ModelKind:
        """The kind of its models (a fleet carries one kind)."""
        return kinds.model_kind(self.models[0])


def image_unit_names(model_names: Iterable[str], fleets: Mapping[str, Fleet], env_name: str) -> list[str]:
    """The image units of `env_name`, by name, sorted: each neuron-cores fleet deployed there, and each model
    no such fleet carries (an inference-components fleet's members keep their own stacks and images)."""
    packed = {
        name: fleet
        for name, fleet in fleets.items()
        if kinds.fleet_kind(fleet).serves_members and fleet.deploys_in(env_name)
    }
    members = {model for fleet in packed.values() for model in fleet.models}
    return sorted([m for m in model_names if m not in members] + list(packed))


@dataclass(frozen=True)
class Project:
    config_dir: Path
    default_environment: str
    environments: Mapping[str, Environment]
    models: tuple[Model, ...]
    model_files: Mapping[str, Path]
    # environment -> its promoted release, for environments whose `release:` names a pin file
    releases: Mapping[str, release_pin.ReleasePin] = field(default_factory=lambda: MappingProxyType({}))
    pipeline: PipelineSettings | None = None
    # what loads but deserves a look (`validate` prints them as warnings), e.g. a model on Inf1
    warnings: tuple[Problem, ...] = ()
    # fleet name -> models sharing accelerators (environments.yaml `fleets:`)
    fleets: Mapping[str, Fleet] = field(default_factory=lambda: MappingProxyType({}))

    def is_production(self, env_name: str) -> bool:
        return is_production(self.environments, self.pipeline, env_name)

    def model(self, name: str) -> Model:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(f"no model named {name!r}; known: {', '.join(m.name for m in self.models)}")

    def fleet_of(self, model: str, env_name: str) -> str | None:
        """The fleet that carries `model` in `env_name`, or None where it has its own endpoint or instances."""
        for name, fleet in self.fleets.items():
            if model in fleet.models and fleet.deploys_in(env_name):
                return name
        return None

    def fleet_members(self, fleet: str) -> list[Model]:
        return [self.model(name) for name in self.fleets[fleet].models]

    def fleets_in(self, env_name: str) -> list[str]:
        return [name for name, fleet in self.fleets.items() if fleet.deploys_in(env_name)]

    def models_in(self, env_name: str) -> list[Model]:
        """The models deployed in `env_name` (a model file's `deploy_in`; omitted: every environment)."""
        return [m for m in self.models if m.deploys_in(env_name)]

    def image_units(self, env_name: str) -> list[ImageUnit]:
        """Every dedicated model and every neuron-cores fleet of `env_name`, by name: what a release pin covers,
        what promote copies and what smoke reaches each model through. A model not deployed there has none."""
        units = []
        for name in image_unit_names((m.name for m in self.models_in(env_name)), self.fleets, env_name):
            fleet = self.fleets.get(name)
            if fleet is not None and kinds.fleet_kind(fleet).serves_members:
                units.append(ImageUnit(name, tuple(self.fleet_members(name)), fleet=True))
            else:
                units.append(ImageUnit(name, (self.model(name),)))
        return units


def load(config_dir: Path | str, *, releases: bool = True, image_context_root: Path | None = None) -> Project:
    """`releases=False` skips reading the pin files: promote must load a config whose target pin is stale
    or missing (it is about to rewrite it), and smoke and release do not use pins. `image_context_root`: the
    repository the images build from, where a local checkpoint's config.json is read (default: this one)."""
    config_dir = Path(config_dir)
    context_root = Path(image_context_root) if image_context_root is not None else architecture.REPOSITORY_ROOT
    problems: list[Problem] = []
    if not config_dir.is_dir():
        raise ConfigError([Problem(str(config_dir), None, "", "config directory not found")])

    env_path = config_dir / ENVIRONMENTS_FILE
    env_doc = _parse(env_path, problems, config_dir)
    env_file = _validate(EnvironmentsFile, env_path, env_doc, problems, config_dir) if env_doc else None
    environments = dict(env_file.environments) if env_file else {}
    if env_file:
        for key, message in [
            *checks.check_pipeline(env_file),
            *checks.check_accounts(env_file),
            *checks.check_networks(env_file),
        ]:
            problems.append(_problem(env_path, config_dir, env_doc, key, message))

    models: list[tuple[Model, Path, YamlDocument]] = []
    model_files = sorted(p for p in config_dir.glob("*.y*ml") if p.name != ENVIRONMENTS_FILE)
    for path in model_files:
        loaded = _load_model(path, problems, config_dir)
        if loaded:
            models.append(loaded)
    # A model file that did not load would show up again as an "unknown model" of its fleet.
    all_models_loaded = len(models) == len(model_files)

    seen: dict[str, Path] = {}
    warnings: list[Problem] = []
    for model, path, doc in models:
        if model.name in seen:
            problems.append(
                _problem(
                    path,
                    config_dir,
                    doc,
                    ("name",),
                    f"duplicate model name {model.name!r}, also in {seen[model.name].name}",
                )
            )
        else:
            seen[model.name] = path
        if env_file:
            for key, message in checks.check_model(model, environments):
                problems.append(_problem(path, config_dir, doc, key, message))
        if isinstance(model, TritonSageMakerModel) and model.pipeline:
            # Also keeps each step file's text on its step: the image build gets it in the repository spec.
            problems.extend(
                _problem(path, config_dir, doc, key, message)
                for key, message in pipeline_checks.check_files(
                    model, config_dir / model.name, _display(config_dir / model.name, config_dir)
                )
            )
        family_problems, family_warnings = architecture.check(model, context_root)
        problems.extend(_problem(path, config_dir, doc, key, message) for key, message in family_problems)
        warnings.extend(_problem(path, config_dir, doc, key, f"warning: {message}") for key, message in family_warnings)
        if env_file:
            warnings.extend(
                _problem(path, config_dir, doc, key, f"warning: {message}")
                for key, message in [
                    *checks.model_warnings(env_file, model),
                    *checks.estimate_warnings(env_file, model),
                ]
            )

    if env_file:
        unique = {model.name: model for model, _, _ in models}
        warnings.extend(
            _problem(env_path, config_dir, env_doc, key, f"warning: {message}")
            for key, message in [
                *checks.fleet_warnings(env_file, unique),
                *checks.fleet_estimate_warnings(env_file, unique),
            ]
        )
        for key, message in [
            *checks.check_pipeline_capacity(env_file, list(unique.values())),
            *(checks.check_fleets(env_file, unique) if all_models_loaded else ()),
        ]:
            problems.append(_problem(env_path, config_dir, env_doc, key, message))

    pins: dict[str, release_pin.ReleasePin] = {}
    if env_file and releases and not problems:
        pins = _load_pins(config_dir, env_path, environments, [m for m, _, _ in models], env_file.fleets, problems)

    if problems:
        raise ConfigError(problems)
    assert env_file is not None  # no problems means the file loaded
    return Project(
        config_dir=config_dir,
        default_environment=env_file.default_environment,
        environments=MappingProxyType(environments),
        models=tuple(m for m, _, _ in models),
        model_files=MappingProxyType({m.name: p for m, p, _ in models}),
        releases=MappingProxyType(pins),
        pipeline=env_file.pipeline,
        fleets=MappingProxyType(dict(env_file.fleets)),
        warnings=tuple(sorted(warnings)),
    )


def pin_path(config_dir: Path, environment: Environment) -> Path | None:
    """Where an environment's pin file lives: relative to the config directory, so a copy of the
    directory (a test, a review checkout) carries its pins with it."""
    return config_dir / environment.release.manifest if environment.release else None


def _load_pins(
    config_dir: Path,
    env_path: Path,
    environments: dict[str, Environment],
    models: list[Model],
    fleets: Mapping[str, Fleet],
    problems: list[Problem],
) -> dict[str, release_pin.ReleasePin]:
    env_doc = parse(env_path)
    pins = {}
    for env_name, environment in environments.items():
        path = pin_path(config_dir, environment)
        if path is None:
            continue
        pin, read_problems = release_pin.read(path)
        if read_problems:
            where = ("environments", env_name, "release", "manifest")
            for key, line, message in read_problems:
                if not key and line is None:  # the file itself is missing or unreadable: point at the reference
                    problems.append(
                        _problem(env_path, config_dir, env_doc, where, f"{_display(path, config_dir)}: {message}")
                    )
                else:
                    problems.append(Problem(_display(path, config_dir), line, key, message))
            continue
        assert pin is not None
        model_names = [m.name for m in models if m.deploys_in(env_name)]
        findings = list(release_pin.check(pin, env_name, environment, image_unit_names(model_names, fleets, env_name)))
        problems.extend(Problem(_display(path, config_dir), None, key, message) for key, message in findings)
        if not findings:
            pins[env_name] = pin
    return pins


def _display(path: Path, config_dir: Path) -> str:
    try:
        return str(path.relative_to(config_dir.parent))
    except ValueError:
        return str(path)


def _problem(path: Path, config_dir: Path, doc: YamlDocument | None, key: tuple, message: str) -> Problem:
    return Problem(
        _display(path, config_dir), doc.line_of(tuple(key)) if doc else None, ".".join(str(k) for k in key), message
    )


def _parse(path: Path, problems: list[Problem], config_dir: Path) -> YamlDocument | None:
    if not path.is_file():
        problems.append(Problem(_display(path, config_dir), None, "", "file not found"))
        return None
    try:
        doc = parse(path)
    except YamlSyntaxError as exc:
        problems.append(Problem(_display(path, config_dir), exc.line, ".".join(map(str, exc.key)), str(exc)))
        return None
    for key, line in doc.duplicate_keys:
        problems.append(Problem(_display(path, config_dir), line, ".".join(map(str, key)), "duplicate key"))
    if not isinstance(doc.data, dict):
        problems.append(Problem(_display(path, config_dir), 1, "", "expected a mapping at the top level"))
        return None
    return doc


def _validate(
    schema: type[SchemaT], path: Path, doc: YamlDocument, problems: list[Problem], config_dir: Path
) -> SchemaT | None:
    try:
        return schema.model_validate(doc.data)
    except ValidationError as exc:
        model_kind = next((k for k in kinds.MODEL_KINDS.values() if k.schema is schema), None)
        for error in exc.errors(include_url=False):
            raw = tuple(error["loc"])
            loc = tuple(part for part in raw if part != "[key]")  # pydantic's marker for dict keys
            kind = model_kind
            if len(loc) > 2 and loc[0] == "fleets" and loc[2] in kinds.FLEET_KINDS:
                if loc[3:] == ("models",) and error["type"] == "too_short":
                    problems.append(
                        _problem(
                            path,
                            config_dir,
                            doc,
                            loc[:2] + loc[3:],
                            checks.fleet_too_small(str(loc[1]), str(loc[2]), error),
                        )
                    )
                    continue
                kind = kinds.FLEET_KINDS[loc[2]].member  # a fleet's instances are its members' kind
                loc = loc[:2] + loc[3:]  # the union's tag, not a key of the file
            problems.append(_problem(path, config_dir, doc, loc, _message(error, schema, raw, kind)))
        return None


def _message(
    error: ErrorDetails, schema: type[BaseModel] | None = None, loc: tuple = (), kind: kinds.ModelKind | None = None
) -> str:
    """One line for a pydantic error: with a "did you mean" where a close spelling exists (a key of the
    mapping, a choice of a Literal), and an unknown instance type answered with the types `kind` runs on."""
    error_type = error["type"]
    if error_type == "missing":
        return "required field is missing"
    if error_type == "extra_forbidden":
        allowed = _keys_at(schema, loc[:-1]) if schema is not None and loc else []
        return "unknown key" + checks.did_you_mean(str(loc[-1]) if loc else "", allowed, "; did you mean {!r}?")
    if isinstance((error.get("ctx") or {}).get("error"), instances.UnknownInstanceType) and isinstance(
        error.get("input"), str
    ):
        if kind is None:
            return instances.unknown_message(error["input"])
        return instances.unknown_message(error["input"], kind.name, kind.accelerator)
    message = error["msg"].removeprefix("Value error, ")
    if error_type in {"value_error", "assertion_error"}:
        return message
    if error_type == "literal_error" and isinstance(error.get("input"), str):
        choices = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        message += checks.did_you_mean(error["input"], choices, ", did you mean {!r}?")
    return f"{message} (got {_brief(error.get('input'))})"


def _keys_at(schema: object, loc: tuple) -> list[str]:
    """The keys the schema allows in the mapping at `loc` (a pydantic error location: dict keys and list
    indexes as they are, a discriminated union's tag where it chose a member), or [] where that is unclear."""
    node = _unwrap(schema)
    for index, part in enumerate(loc):
        if isinstance(node, type) and issubclass(node, BaseModel):
            fields = [f for name, f in node.model_fields.items() if part in (name, f.alias)]
            if not fields:
                return []
            node = _unwrap(fields[0].annotation)
        elif typing.get_origin(node) in (typing.Union, types.UnionType):
            members = [m for m in typing.get_args(node) if m is not type(None)]
            tagged = [m for m in members if _tag(m) == part]
            if tagged:  # a discriminated union's tag: it names the member, it is not a key
                node = _unwrap(tagged[0])
                continue
            return sorted({key for m in members for key in _keys_at(m, loc[index:])})
        elif typing.get_origin(node) is dict:
            node = _unwrap(typing.get_args(node)[1])
        elif typing.get_origin(node) is tuple:
            node = _unwrap(typing.get_args(node)[0])
        else:
            return []
    if typing.get_origin(node) in (typing.Union, types.UnionType):
        return sorted({key for m in typing.get_args(node) for key in _keys_at(m, ())})
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [f.alias or name for name, f in node.model_fields.items()]
    return []


def _unwrap(annotation: object) -> object:
    """`Annotated[X, ...]` -> X."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _tag(member: object) -> object:
    """The `kind` Literal value of a discriminated union's member, or None."""
    if not (isinstance(member, type) and issubclass(member, BaseModel)) or "kind" not in member.model_fields:
        return None
    args = typing.get_args(member.model_fields["kind"].annotation)
    return args[0] if len(args) == 1 else None


_BRIEF = reprlib.Repr()  # Python 3.11's Repr takes no arguments
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 2, 60, 60, 40
_BRIEF.maxdict = _BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxset = 4


def _brief(value: object) -> str:
    """The offending input, cut short: a config value may be a 200 KB string or a 10,000-node list."""
    return _BRIEF.repr(value)


def _load_model(path: Path, problems: list[Problem], config_dir: Path):
    doc = _parse(path, problems, config_dir)
    if doc is None:
        return None
    kind = doc.data.get("kind") if isinstance(doc.data, dict) else None  # _parse returns mappings only
    found = kinds.MODEL_KINDS.get(kind) if isinstance(kind, str) else None
    if found is None:
        hint = checks.did_you_mean(kind, kinds.MODEL_KINDS, ", did you mean {!r}?") if isinstance(kind, str) else ""
        problems.append(
            _problem(
                path, config_dir, doc, ("kind",), f"must be one of {', '.join(kinds.MODEL_KINDS)}{hint} (got {kind!r})"
            )
        )
        return None
    model = _validate(found.schema, path, doc, problems, config_dir)
    return (model, path, doc) if model else None


def not_deployed_note(config_dir: Path, env_name: str, pin_path: Path) -> str:
    """What to add so that `env_name` deploys the pin just written (promote and rollback print it)."""
    return (
        f"note: {env_name} does not deploy it yet: add `release: {{manifest: "
        f"{pin_path.relative_to(config_dir).as_posix()}}}` to environments.{env_name} in "
        f"{config_dir / ENVIRONMENTS_FILE}"
    )
