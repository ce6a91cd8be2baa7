"""The smoke probe: a Lambda function in an environment's private subnets that POSTs one JSON request to
a model server behind the environment's internal load balancer and reports status, reply and latency as
measured inside the VPC. Standard library only (packaged as this directory, no dependencies).

Event: {"url": "http://internal-....elb.amazonaws.com/v2/models/m/infer", "body": {...}, "timeout": 10}
Result: {"status": 200, "body": {...} | null, "text": "<reply if not JSON>", "latency_ms": 3.2}
        or {"error": "one line"} when no HTTP reply came back (bad event, refused host, network, timeout).

Which hosts it calls is configured by the function's environment: PROBE_ALLOWED_HOST_SUFFIXES (comma
separated, e.g. ".us-east-1.elb.amazonaws.com") and PROBE_ALLOWED_NETWORKS (CIDRs, e.g. the VPC's):
the host name must end with a suffix and every address it resolves to must lie in a network. The request
then goes to the address that was checked (no second lookup)."""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
import ssl
import time
import urllib.parse

SCHEMES = {"http": 80, "https": 443}
MAX_TIMEOUT_S = 50.0  # the function's own timeout (60 s) leaves room for the reply
MAX_REPLY_BYTES = 1024 * 1024  # a smoke reply is small; a synchronous Lambda result is capped at 6 MB
TEXT_PREVIEW = 500


class ProbeError(Exception):
    """The request could not be made or got no HTTP reply; the message is the one-line result."""


def handler(event, context=None) -> dict:
    try:
        url, body, timeout = _parse_event(event)
        allowed = Allowed.from_environment(os.environ)
        return post_json(url, body, timeout, allowed)
    except ProbeError as exc:
        return {"error": str(exc)}


def _parse_event(event) -> tuple[str, object, float]:
    if not isinstance(event, dict):
        raise ProbeError("event must be an object with url, body and timeout")
    url, body, timeout = event.get("url"), event.get("body"), event.get("timeout", 10)
    if not isinstance(url, str) or not url:
        raise ProbeError("url must be a non-empty string")
    if body is None:
        raise ProbeError("body is required (the JSON request to POST)")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ProbeError(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    return url, body, float(timeout)


class Allowed:
    """Host name suffixes and networks the probe may call."""

    def __init__(
        self, host_suffixes: tuple[str, ...], networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    ):
        self.host_suffixes = tuple(s.lower() for s in host_suffixes)
        self.networks = networks

    @classmethod
    def from_environment(cls, environ) -> Allowed:
        suffixes = tuple(s.strip() for s in environ.get("PROBE_ALLOWED_HOST_SUFFIXES", "").split(",") if s.strip())
        try:
            networks = tuple(
                ipaddress.ip_network(n.strip())
                for n in environ.get("PROBE_ALLOWED_NETWORKS", "").split(",")
                if n.strip()
            )
        except ValueError as exc:
            raise ProbeError(f"PROBE_ALLOWED_NETWORKS: {exc}") from None
        if not suffixes or not networks:
            raise ProbeError(
                "the probe is not configured: PROBE_ALLOWED_HOST_SUFFIXES and PROBE_ALLOWED_NETWORKS "
                "must name the hosts and networks it may call"
            )
        return cls(suffixes, networks)

    def check_host(self, host: str) -> None:
        name = host.lower().rstrip(".")
        if not any(
            name == s.lstrip(".") or name.endswith(s if s.startswith(".") else "." + s) for s in self.host_suffixes
        ):
            raise ProbeError(f"host {host} is not allowed (allowed: *{', *'.join(self.host_suffixes)})")

    def check_address(self, host: str, address: str) -> None:
        ip = ipaddress.ip_address(address)
        if not any(ip in network for network in self.networks):
            raise ProbeError(
                f"host {host} resolves to {address}, outside the allowed networks "
                f"({', '.join(map(str, self.networks))})"
            )


def post_json(url: str, body, timeout: float, allowed: Allowed) -> dict:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ProbeError(f"url scheme must be http or https, got {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise ProbeError(f"url has no host: {url}")
    if parts.username or parts.password:
        raise ProbeError("url must not carry credentials")
    try:
        port = parts.port or SCHEMES[parts.scheme]
    except ValueError:
        raise ProbeError(f"url has an invalid port: {url}") from None
    allowed.check_host(parts.hostname)
    address = _resolve(parts.hostname, port, allowed)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    payload = json.dumps(body).encode()

    connection_class = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = connection_class(parts.hostname, port, address=address, timeout=timeout)
    start = time.perf_counter()
    try:
        connection.request(
            "POST", path, body=payload, headers={"Content-Type": "application/json", "Accept": "application/json"}
        )
        response = connection.getresponse()
        reply = response.read(MAX_REPLY_BYTES + 1)
        latency_ms = (time.perf_counter() - start) * 1000
        status = response.status
    except TimeoutError:
        raise ProbeError(f"{url}: no reply within {timeout:g} s") from None
    except ConnectionRefusedError:
        raise ProbeError(f"{url}: connection refused ({address}:{port})") from None
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(f"{url}: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    finally:
        connection.close()
    if len(reply) > MAX_REPLY_BYTES:
        raise ProbeError(f"{url}: reply larger than {MAX_REPLY_BYTES} bytes")
    result: dict[str, object] = {"status": status, "latency_ms": round(latency_ms, 3), "body": None}
    try:
        result["body"] = json.loads(reply)
    except (ValueError, UnicodeDecodeError):
        result["text"] = reply[:TEXT_PREVIEW].decode("utf-8", "replace")
    return result


def _resolve(host: str, port: int, allowed: Allowed) -> str:
    """The first address of `host`, after checking that every address it has is allowed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ProbeError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))  # an IPv4/IPv6 sockaddr's host
    for address in addresses:
        allowed.check_address(host, address)
    return addresses[0]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address that was checked; the Host header still names the host."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = 443

    def connect(self) -> None:
        super().connect()
        # Certificate and name checked against the host, not the address.
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host)
