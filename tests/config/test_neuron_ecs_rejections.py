"""Config the Inferentia ECS service reads (load balancer, scaling, alarms, host) is rejected with one line
naming file, line and key; the accepted forms resolve as the service expects."""

from __future__ import annotations

import pytest

from inferstack import config
from tests.support.config_edits import assert_rejected, edit_yaml, problems_of, set_at

DEV_CERT = "arn:aws:acm:us-east-1:111111111111:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
PROD_CERT = "arn:aws:acm:us-west-2:333333333333:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


def _env_defaults(env, **values):
    def change(data):
        data["environments"][env].setdefault("defaults", {}).update(values)

    return change


def _both(*changes):
    def change(data):
        for one in changes:
            one(data)

    return change


CASES = {
    "public load balancer without a certificate": (
        "environments.yaml",
        _env_defaults("dev", public_load_balancer=True),
        "environments.dev.defaults: public_load_balancer needs certificate_arn",
    ),
    "certificate that is not an ACM ARN": (
        "environments.yaml",
        _env_defaults("dev", certificate_arn="arn:aws:iam::111111111111:server-certificate/x"),
        "environments.dev.defaults.certificate_arn: String should match pattern",
    ),
    "certificate of another region": (
        "environments.yaml",
        _env_defaults("dev", certificate_arn=PROD_CERT.replace("333333333333", "111111111111")),
        "environments.dev: defaults.certificate_arn is in 111111111111/us-west-2",
    ),
    "certificate of another account": (
        "environments.yaml",
        _env_defaults("dev", certificate_arn=DEV_CERT.replace("111111111111", "999999999999")),
        "environments.dev: defaults.certificate_arn is in 999999999999/us-east-1",
    ),
    "public default in an imported VPC without public subnets": (
        "environments.yaml",
        _env_defaults("prod", public_load_balancer=True, certificate_arn=PROD_CERT),
        "environments.prod: defaults.public_load_balancer needs public subnets",
    ),
    "public model without a certificate": (
        "intent-bert.yaml",
        set_at("load_balancer", value={"public": True}),
        "load_balancer.public: a public load balancer serves HTTPS only: set defaults.certificate_arn",
    ),
    "not a boolean for public": (
        "intent-bert.yaml",
        set_at("load_balancer", value={"public": "perhaps"}),
        "load_balancer.public: Input should be a valid boolean",
    ),
    "deregistration delay out of range": (
        "intent-bert.yaml",
        set_at("load_balancer", value={"deregistration_delay_seconds": 5000}),
        "load_balancer.deregistration_delay_seconds: Input should be less than or equal to 3600",
    ),
    "unknown load balancer key": (
        "intent-bert.yaml",
        set_at("load_balancer", value={"scheme": "internal"}),
        "load_balancer.scheme: unknown key",
    ),
    "negative cooldown": (
        "intent-bert.yaml",
        set_at("scaling", value={"scale_in_cooldown_seconds": -1}),
        "scaling.scale_in_cooldown_seconds: Input should be greater than or equal to 0",
    ),
    "cooldown that is not a number": (
        "intent-bert.yaml",
        set_at("scaling", value={"scale_out_cooldown_seconds": "1m"}),
        "scaling.scale_out_cooldown_seconds: Input should be a valid integer",
    ),
    "unknown scaling key": (
        "intent-bert.yaml",
        set_at("scaling", value={"target": 100}),
        "scaling.target: unknown key",
    ),
    "zero error rate": (
        "intent-bert.yaml",
        set_at("alarms", value={"error_rate_percent": 0}),
        "alarms.error_rate_percent: Input should be greater than 0",
    ),
    "cpu alarm above 100%": (
        "intent-bert.yaml",
        set_at("alarms", value={"cpu_percent": 150}),
        "alarms.cpu_percent: Input should be less than or equal to 100",
    ),
    "memory alarm not a number": (
        "intent-bert.yaml",
        set_at("alarms", value={"memory_percent": "high"}),
        "alarms.memory_percent: Input should be a valid number",
    ),
    "no evaluation period": (
        "intent-bert.yaml",
        set_at("alarms", value={"evaluation_minutes": 0}),
        "alarms.evaluation_minutes: Input should be greater than or equal to 1",
    ),
    "root volume smaller than the AMI": (
        "intent-bert.yaml",
        set_at("serving", "root_volume_gib", value=8),
        "serving.root_volume_gib: Input should be greater than or equal to 30",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rejection(config_copy, case):
    assert_rejected(config_copy, *CASES[case])


def test_public_model_in_an_imported_vpc_without_public_subnets(config_copy):
    edit_yaml(
        config_copy / "environments.yaml",
        _both(
            _env_defaults("dev", certificate_arn=DEV_CERT),
            _env_defaults("staging", certificate_arn=DEV_CERT.replace("111111111111", "222222222222")),
            _env_defaults("prod", certificate_arn=PROD_CERT),
        ),
    )
    edit_yaml(config_copy / "intent-bert.yaml", set_at("load_balancer", value={"public": True}))
    (problem,) = [p for p in problems_of(config_copy) if ": load_balancer.public" in p]
    assert problem.startswith("model_configs/intent-bert.yaml:")
    assert problem.endswith(
        "load_balancer.public: a public load balancer needs public subnets: set "
        "network.import.public_subnet_ids in environments.yaml (environment prod)"
    )


def test_public_load_balancer_resolves_model_over_environment(config_copy):
    edit_yaml(
        config_copy / "environments.yaml", _env_defaults("dev", public_load_balancer=True, certificate_arn=DEV_CERT)
    )
    project = config.load(config_copy)
    intent = project.model("intent-bert")
    assert project.environments["dev"].defaults.certificate_arn == DEV_CERT
    assert intent.public_load_balancer(project.environments["dev"]) is True
    assert intent.public_load_balancer(project.environments["prod"]) is False
    private = intent.model_copy(update={"load_balancer": intent.load_balancer.model_copy(update={"public": False})})
    assert private.public_load_balancer(project.environments["dev"]) is False


def test_defaults_of_the_service_settings(config_copy):
    intent = config.load(config_copy).model("intent-bert")
    assert (intent.load_balancer.public, intent.load_balancer.deregistration_delay_seconds) == (None, 15)
    assert (intent.scaling.scale_out_cooldown_seconds, intent.scaling.scale_in_cooldown_seconds) == (60, 300)
    assert (intent.alarms.error_rate_percent, intent.alarms.cpu_percent, intent.alarms.memory_percent) == (1, 90, 90)
    assert intent.serving.root_volume_gib == 100
