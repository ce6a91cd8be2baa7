"""SageMaker rules AWS enforces that moto 5.2.5 does not: an endpoint update may not change the instance type of,
or remove, a production variant that is a registered Application Auto Scaling target."""

from __future__ import annotations

from rehearsal.emulator_patch import Patch, Undo, replace

VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"


def variant_resource_id(endpoint_name: str, variant_name: str) -> str:
    return f"endpoint/{endpoint_name}/variant/{variant_name}"


def refusal(
    account_id: str, region_name: str, endpoint_name: str, current: dict[str, str | None], new_config: str
) -> str | None:
    """Why AWS refuses to move `endpoint_name`, whose variants run `current` (variant name -> instance type), to
    the endpoint config `new_config` (one moto holds), or None: each current variant that is a registered scalable
    target must still be in the new config, with the same instance type."""
    from moto.applicationautoscaling.models import applicationautoscaling_backends
    from moto.sagemaker.models import sagemaker_backends

    scaling = applicationautoscaling_backends[account_id][region_name]
    new = {
        v["VariantName"]: v.get("InstanceType")
        for v in sagemaker_backends[account_id][region_name].endpoint_configs[new_config].production_variants
    }
    refused = []
    for name, instance_type in current.items():
        if not scaling.describe_scalable_targets(
            "sagemaker", [variant_resource_id(endpoint_name, name)], VARIANT_DIMENSION
        ):
            continue
        if name not in new:
            refused.append(f"{name} (removed)")
        elif new[name] != instance_type:
            refused.append(f"{name} ({instance_type} -> {new[name]})")
    if not refused:
        return None
    return (
        f"Endpoint {endpoint_name}: the update changes the instance type of, or removes, variant(s) that are "
        f"registered as Application Auto Scaling scalable targets: {', '.join(refused)}. Deregister the scalable "
        f"target(s) before the update (DeregisterScalableTarget) and register them again after it."
    )


def _autoscaled_variant_update() -> Undo:
    """SageMaker developer guide, "Update endpoints that use auto scaling"
    (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html): "When you update an endpoint,
    Application Auto Scaling checks to see whether any of the models on that endpoint are targets for auto scaling.
    If the update would change the instance type for any model that is a target for auto scaling, the update fails.
    [...] If you are trying to update the endpoint by calling the UpdateEndpoint API, the call fails. Before you
    update the endpoint, delete any scaling policies configured for it and deregister the variant as a scalable
    target"; the deregistration is "required only if you are updating an endpoint with the following changes:
    Changing the instance type for a production variant that has auto scaling configured; Removing a production
    variant that has auto scaling configured".

    moto 5.2.5 checks none of it. Its CloudFormation updates an AWS::SageMaker::Endpoint (its only way to move an
    endpoint to a new config: moto does not implement the UpdateEndpoint API) by deleting the endpoint and
    creating it again on the new config, whatever targets are registered. Refuse that update as AWS refuses
    UpdateEndpoint: a ValidationException (HTTP 400). AWS does not document the message's wording; the text here
    is ours, naming the variants, their instance types and what the docs say to do."""
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import FakeEndpoint, SageMakerModelBackend

    original_create = SageMakerModelBackend.__dict__["create_endpoint"]
    original_update = FakeEndpoint.__dict__["update_from_cloudformation_json"].__func__

    # moto's endpoint keeps no instance type, and without the sagemaker-replacements-in-cleanup workaround its
    # CloudFormation deletes a replaced endpoint config at once (AWS: in the cleanup phase, after the endpoint moved
    # off it): remember what each variant was created on, so the rule holds either way.
    def create_endpoint(self, endpoint_name, endpoint_config_name, tags):
        endpoint = original_create(self, endpoint_name, endpoint_config_name, tags)
        endpoint.instance_types = {
            v["VariantName"]: v.get("InstanceType")
            for v in self.endpoint_configs[endpoint_config_name].production_variants
        }
        return endpoint

    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        new_config = (cloudformation_json.get("Properties") or {}).get("EndpointConfigName")
        current = getattr(original_resource, "instance_types", None)
        why = (
            refusal(account_id, region_name, original_resource.endpoint_name, current, new_config)
            if new_config and current is not None
            else None
        )
        if why:
            raise ValidationError(message=why)
        return original_update(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)

    undo = [
        replace(SageMakerModelBackend, "create_endpoint", create_endpoint),
        replace(FakeEndpoint, "update_from_cloudformation_json", classmethod(update_from_cloudformation_json)),
    ]

    def undo_all() -> None:
        for restore in reversed(undo):
            restore()

    return undo_all


RULES: tuple[Patch, ...] = (
    Patch(
        "autoscaled-variant-update",
        "an AWS::SageMaker::Endpoint update that changes the instance type of (or removes) a variant registered as "
        "an Application Auto Scaling scalable target goes through; AWS refuses UpdateEndpoint until the target is "
        "deregistered (ValidationException)",
        _autoscaled_variant_update,
    ),
)
