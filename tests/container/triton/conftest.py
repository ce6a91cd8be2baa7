"""Fixtures of the real-Triton tier (marker real_triton; what they build: tests/support/real_triton.py): the
contract synthesized from dev, the side environment's tritonserver, and one server per shipped Triton model."""

from __future__ import annotations

import pytest

from rehearsal import triton_server
from tests.support.real_triton import Served, build_contract, exported, without_queue_policy


@pytest.fixture(scope="session")
def contract(tmp_path_factory) -> dict[str, dict]:
    return build_contract(tmp_path_factory)


@pytest.fixture(scope="session")
def triton_install() -> triton_server.TritonInstall:
    try:
        return triton_server.TritonInstall.locate()
    except FileNotFoundError as exc:
        # `make setup` builds it; a missing environment fails the tier instead of passing it by skipping.
        pytest.fail(f"real-Triton tier: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def serve(tmp_path_factory, contract, triton_install):
    """serve(name) -> Served: one server per model and worker, started on first use, stopped at the end
    of the session (a failed start is not retried). Besides SageMaker's front end each server has Triton's
    HTTP front end on loopback (TritonServer.http_front_end), so tests can call the token-id model by name."""
    servers: dict[str, Served] = {}
    failed: dict[str, BaseException] = {}

    def get(name: str) -> Served:
        if name in failed:  # one start attempt per model and worker
            raise failed[name]
        if name not in servers:
            export = exported(tmp_path_factory, contract, name)
            work = tmp_path_factory.mktemp(f"triton-{name}")
            copy = work / "model"  # stands for /opt/ml/model
            rewrites = triton_server.cpu_copy(export.repository, copy) + without_queue_policy(copy)
            batch_log = work / "batches.jsonl"
            environment = dict(contract[name]["environment"])
            server = triton_server.TritonServer(
                copy,
                environment,
                work_dir=work / "server",
                install=triton_install,
                extra_env={triton_server.BATCH_LOG_ENV: str(batch_log)},
                http_front_end=True,
            )
            try:
                server.start()
            except BaseException as exc:
                failed[name] = exc
                raise
            servers[name] = Served(export, copy, rewrites, environment, server, batch_log)
        return servers[name]

    yield get
    for served in servers.values():
        served.server.stop()
