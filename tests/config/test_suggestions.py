"""Messages that finish the job: an unknown key, choice, kind or environment gets a "did you mean" when one
is close; an unknown instance type lists only the types the model's kind runs on and says when the `ml.`
prefix is missing or present where it does not belong. Still one line naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstack.schema import instances
from tests.support.config_edits import edit_yaml, problems_of, set_at

NEURON_TYPES = (
    "inf1.xlarge, inf1.2xlarge, inf1.6xlarge, inf1.24xlarge, inf2.xlarge, inf2.8xlarge, inf2.24xlarge, inf2.48xlarge"
)
TRITON_TYPES = (
    "ml.g4dn.xlarge, ml.g4dn.2xlarge, ml.g4dn.4xlarge, ml.g4dn.8xlarge, ml.g4dn.12xlarge, "
    "ml.g4dn.16xlarge, ml.g5.xlarge, ml.g5.2xlarge, ml.g5.4xlarge, ml.g5.12xlarge"
)


def rename(*path, to):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[to] = node.pop(path[-1])

    return change


def the_problem(config_dir: Path, filename: str, change, key: str) -> str:
    """The one problem at `key` after `change`, checked to be a file:line: key: message line whose line holds
    the key."""
    edit_yaml(config_dir / filename, change)
    problems = [p for p in problems_of(config_dir) if f": {key}: " in p]
    assert len(problems) == 1, problems
    problem = problems[0]
    assert problem.startswith(f"model_configs/{filename}:") and "\n" not in problem
    line = int(problem.split(":")[1])
    assert key.split(".")[-1] in (config_dir / filename).read_text().splitlines()[line - 1]
    return problem.split(f": {key}: ", 1)[1]


CASES = {
    "a model key": (
        "intent-bert.yaml",
        rename("serving", "max_batch_size", to="max_batch_sise"),
        "serving.max_batch_sise",
        "unknown key; did you mean 'max_batch_size'?",
    ),
    "a top-level model key": (
        "intent-bert-inf2.yaml",
        set_at("deploy_inn", value=["dev"]),
        "deploy_inn",
        "unknown key; did you mean 'deploy_in'?",
    ),
    "a triton key": (
        "t5-spelling.yaml",
        rename("export", "max_output_length", to="max_output_len"),
        "export.max_output_len",
        "unknown key; did you mean 'max_output_length'?",
    ),
    "an override key": (
        "t5-spelling.yaml",
        rename("environments", "dev", "off_hours", to="offhours"),
        "environments.dev.offhours",
        "unknown key; did you mean 'off_hours'?",
    ),
    "a key of a fleet (a discriminated union)": (
        "environments.yaml",
        rename("fleets", "intent-pack", "capacity", to="capacty"),
        "fleets.intent-pack.capacty",
        "unknown key; did you mean 'capacity'?",
    ),
    "a key with an alias": (
        "environments.yaml",
        rename("environments", "prod", "network", "import", to="imprt"),
        "environments.prod.network.imprt",
        "unknown key; did you mean 'import'?",
    ),
    "a key nothing is close to": (
        "intent-bert.yaml",
        set_at("serving", "colour", value="red"),
        "serving.colour",
        "unknown key",
    ),
    "a choice": (
        "t5-spelling.yaml",
        set_at("serving", "backend", value="onxx"),
        "serving.backend",
        "Input should be 'onnx' or 'tensorrt', did you mean 'onnx'? (got 'onxx')",
    ),
    "a kind": (
        "t5-spelling.yaml",
        set_at("kind", value="triton-sagemkaer"),
        "kind",
        "must be one of neuron-ecs, triton-sagemaker, did you mean 'triton-sagemaker'? (got 'triton-sagemkaer')",
    ),
    "an override's environment": (
        "t5-spelling.yaml",
        rename("environments", "staging", to="stagign"),
        "environments.stagign",
        "unknown environment (did you mean 'staging'?); known: dev, prod, staging",
    ),
    # ---- instance types
    "a SageMaker type without ml.": (
        "t5-spelling.yaml",
        set_at("capacity", "instance_type", value="g4dn.xlarge"),
        "capacity.instance_type",
        "unknown instance type 'g4dn.xlarge' (SageMaker instance types take the ml. prefix: did you mean "
        f"'ml.g4dn.xlarge'?); triton-sagemaker runs on: {TRITON_TYPES}",
    ),
    "an EC2 type with ml.": (
        "intent-bert.yaml",
        set_at("capacity", "instance_type", value="ml.inf1.6xlarge"),
        "capacity.instance_type",
        "unknown instance type 'ml.inf1.6xlarge' (inf1 instances are EC2 instances for ECS, named without "
        f"SageMaker's ml. prefix: did you mean 'inf1.6xlarge'?); neuron-ecs runs on: {NEURON_TYPES}",
    ),
    "a typo": (
        "intent-bert.yaml",
        set_at("capacity", "instance_type", value="inf1.6xlarg"),
        "capacity.instance_type",
        f"unknown instance type 'inf1.6xlarg' (did you mean 'inf1.6xlarge'?); neuron-ecs runs on: {NEURON_TYPES}",
    ),
    "a prefix fix of another kind's type": (
        "intent-bert.yaml",
        set_at("capacity", "instance_type", value="g5.xlarge"),
        "capacity.instance_type",
        f"unknown instance type 'g5.xlarge' (ml.g5.xlarge exists, but neuron-ecs does not run on it); neuron-ecs "
        f"runs on: {NEURON_TYPES}",
    ),
    "an override's type": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "capacity", "instance_type", value="ml.g4dn.xlarg"),
        "environments.dev.capacity.instance_type",
        f"unknown instance type 'ml.g4dn.xlarg' (did you mean 'ml.g4dn.xlarge'?); triton-sagemaker runs on: "
        f"{TRITON_TYPES}",
    ),
    "a fleet's type, its members' kind": (
        "environments.yaml",
        set_at("fleets", "triton-shared", "capacity", "instance_type", value="g4dn.xlarge"),
        "fleets.triton-shared.capacity.instance_type",
        "unknown instance type 'g4dn.xlarge' (SageMaker instance types take the ml. prefix: did you mean "
        f"'ml.g4dn.xlarge'?); triton-sagemaker runs on: {TRITON_TYPES}",
    ),
    "a neuron-cores fleet's type": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "capacity", "instance_type", value="inf1.6xl"),
        "fleets.intent-pack.capacity.instance_type",
        f"unknown instance type 'inf1.6xl' (did you mean 'inf1.6xlarge'?); neuron-ecs runs on: {NEURON_TYPES}",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_message(config_copy, case):
    filename, change, key, expected = CASES[case]
    assert the_problem(config_copy, filename, change, key) == expected


def test_a_profile_key_is_an_instance_type_of_the_models_kind(config_copy):
    edit_yaml(config_copy / "t5-spelling.yaml", rename("throughput_profile", "ml.g4dn.xlarge", to="g4dn.xlarge"))
    problems = [p for p in problems_of(config_copy) if "throughput_profile.g4dn.xlarge:" in p]
    assert problems and all("did you mean 'ml.g4dn.xlarge'?); triton-sagemaker runs on:" in p for p in problems)


def test_a_price_for_an_unknown_type_lists_every_type(config_copy):
    edit_yaml(config_copy / "environments.yaml", set_at("environments", "prod", "prices", value={"g5.xlarge": 1.0}))
    (problem,) = [p for p in problems_of(config_copy) if "prices.g5.xlarge" in p]
    assert problem.endswith(
        f"unknown instance type 'g5.xlarge' (SageMaker instance types take the ml. prefix: did "
        f"you mean 'ml.g5.xlarge'?); known: {NEURON_TYPES}, {TRITON_TYPES}"
    )


def test_the_catalogs_own_lookup_suggests_too():
    with pytest.raises(
        instances.UnknownInstanceType,
        match=r"^unknown instance type 'ml\.g5\.xlarg' \(did you mean "
        r"'ml\.g5\.xlarge'\?\); known: inf1\.xlarge",
    ):
        instances.get("ml.g5.xlarg")
