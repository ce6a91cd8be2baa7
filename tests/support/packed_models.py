"""Two tiny BERTs packed into one container (tests/container/neuron/: test_neuron_packed.py, the restart tests):
the second model's labels, the servers' SERVER_MODELS, and free loopback ports for them. The artifacts are
fixtures of tests/container/neuron/conftest.py."""

from __future__ import annotations

import socket

BETA_LABELS = ("spam", "ham")


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (the OS picks them; closed again before the server binds)."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def server_models(alpha_port: int, beta_port: int) -> list[dict]:
    return [
        {"name": "alpha", "port": alpha_port, "visible_cores": "0-1", "workers": 2, "max_queue_delay_ms": 20},
        {"name": "beta", "port": beta_port, "visible_cores": "2-3"},
    ]
