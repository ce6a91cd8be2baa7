"""moto's server as the load tests reach it (the `emulator` fixtures of tests/loadtest/conftest.py): its account
and region, and canned InvokeEndpoint replies queued through its API."""

from __future__ import annotations

import json
import urllib.request

from rehearsal import cli_deploy

ACCOUNT, REGION = "123456789012", "us-east-1"


def seed_reply(aws: cli_deploy.Aws, body: dict) -> None:
    """Queue one canned InvokeEndpoint reply: moto gives it to the next request it has not seen, and again to
    every request like that one (same endpoint, component, body)."""
    request = urllib.request.Request(
        f"{aws.endpoint}/moto-api/static/sagemaker/endpoint-results",
        method="POST",
        data=json.dumps(
            {
                "account_id": aws.account,
                "region": aws.region,
                "results": [{"Body": json.dumps(body), "ContentType": "application/json"}],
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
