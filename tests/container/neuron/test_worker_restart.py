"""A worker that dies is restarted in place (supervisor.py): under load from a few client threads over real HTTP,
its siblings keep answering, only its own connections fail, and its replacement takes connections once warm; a
worker that keeps dying stops the task; SIGTERM during a restart drains and exits 0. The emulated accelerator (a
stand-in: no torch) keeps start-up short; a worker's warm-up is made to last a second or more with many passes."""

from __future__ import annotations

import calendar
import json
import os
import signal
import threading
import time
from dataclasses import dataclass

import pytest
import requests

from tests.support.neuron_server import SERVE, ServerProcess, idle_connections, open_connections, run_script
from tests.support.packed_models import free_ports, server_models

TEXT = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["still there?"]}]}
STANDIN = ("--standin-accelerator-ms", "2")
TWO_WORKERS = {"SERVER_WORKERS": "2", "NEURON_RT_VISIBLE_CORES": "0-3"}


def wait_for(server: ServerProcess, predicate, what: str, timeout: float = 60) -> dict:
    """The first log entry that satisfies ``predicate``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in server.logs():
            if predicate(entry):
                return entry
        time.sleep(0.01)
    raise AssertionError(f"no {what} within {timeout} s:\n" + "\n".join(server.lines[-60:]))


def workers(server: ServerProcess) -> dict[int, dict]:
    """The first two workers' 'worker started' entries by index, once both are ready."""
    wait_for(
        server, lambda e: len([x for x in server.logs() if x.get("msg") == "model ready"]) >= 2, "two ready workers"
    )
    return {e["worker"]: e for e in server.logs() if e.get("msg") == "worker started"}


def restarted(server: ServerProcess, dead_pid: int) -> dict:
    return wait_for(
        server,
        lambda e: e.get("msg") == "worker restarted" and e.get("dead_pid") == dead_pid,
        f"restart of worker pid {dead_pid}",
        timeout=30,
    )


def ready_of(server: ServerProcess, pid: int, timeout: float = 60) -> dict:
    return wait_for(
        server, lambda e: e.get("msg") == "model ready" and e.get("pid") == pid, f"ready worker {pid}", timeout
    )


def wall(ts: str) -> float:
    """A log entry's ts (UTC, ms) as time.time() reads it."""
    seconds, millis = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(seconds, "%Y-%m-%dT%H:%M:%S")) + int(millis) / 1000


@dataclass
class Result:
    client: int
    started: float  # time.time()
    ended: float
    outcome: int | type  # the status code, or the exception's class
    body: str = ""  # what a failed request got, or its exception


class Load:
    """A few clients, each sending one request after another on its own keep-alive connection, as an ALB does."""

    def __init__(self, url: str, clients: int = 4) -> None:
        self.url, self.results, self.stopping = url, [], threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)]
        for thread in self.threads:
            thread.start()

    def _client(self, n: int) -> None:
        with requests.Session() as session:
            while not self.stopping.is_set():
                started = time.time()
                try:
                    response = session.post(self.url + "/v2/models/model/infer", json=TEXT, timeout=30)
                    result = Result(
                        n,
                        started,
                        time.time(),
                        response.status_code,
                        "" if response.status_code == 200 else response.text,
                    )
                except requests.RequestException as exc:  # not kept: its traceback holds the failed socket open
                    result = Result(n, started, time.time(), type(exc), repr(exc))
                self.results.append(result)

    def stop(self) -> list[Result]:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        return self.results


def test_kill_9_costs_only_that_workers_requests_and_it_comes_back_on_its_cores(artifact, start_server):
    # 600 warm-up passes at 2 ms keep a replacement out of the share for a few seconds.
    server = start_server(artifact, env={**TWO_WORKERS, "SERVER_WARMUP_ITERATIONS": "600"}, args=STANDIN)
    server.wait_ready()
    dead = workers(server)[0]
    load = Load(server.url)
    try:
        deadline = time.monotonic() + 30
        while len(load.results) < 50:
            assert time.monotonic() < deadline, "the load never got going"
            time.sleep(0.01)
        # The keep-alive connections sit where they were accepted: at most these requests are in flight there.
        on_dead = int(open_connections(server.url).get(str(dead["worker_pid"]), 0))
        killed = time.time()
        os.kill(dead["worker_pid"], signal.SIGKILL)
        replacement = restarted(server, dead["worker_pid"])
        ready = ready_of(server, replacement["worker_pid"])
        time.sleep(0.5)  # some load after it is back
    finally:
        results = load.stop()
    assert server.proc.poll() is None, "\n".join(server.lines)

    # The same worker, cores and tag, a new process, warm before it was ready.
    assert (replacement["worker"], replacement["visible_cores"], replacement["port"]) == (0, "0-1", server.port)
    assert replacement["signal"] == "SIGKILL" and replacement["restarts"] == 1 and replacement["level"] == "warning"
    assert replacement["worker_pid"] != dead["worker_pid"]
    assert ready["visible_cores"] == "0-1" and ready["warmup_s"] > 0
    restart_s = wall(ready["ts"]) - killed
    assert restart_s < 60

    failed = [r for r in results if r.outcome != 200]
    # No request ever reached the replacement before it was warm: it would have answered 503, model loading.
    assert not [r for r in failed if isinstance(r.outcome, int)], [(r.outcome, r.body) for r in failed]
    # The dead worker's requests failed fast with a closed connection, never a hang: one per connection it had.
    assert all(
        issubclass(r.outcome, requests.ConnectionError) and not issubclass(r.outcome, requests.Timeout) for r in failed
    ), [r.body for r in failed]
    assert all(r.ended - r.started < 10 for r in failed)
    assert len(failed) <= on_dead <= len(load.threads)
    assert len({r.client for r in failed}) == len(failed), "a client failed twice"
    # The other worker answered all along the restart.
    during = [r for r in results if r.outcome == 200 and killed < r.ended < wall(ready["ts"])]
    assert during
    print(
        f"\nkill -9 under load of {len(load.threads)} clients: {len(results)} requests, {len(failed)} failed "
        f"(the dead worker had {on_dead} connections), {len(during)} answered during the restart; "
        f"replacement ready {restart_s:.2f} s after the kill (load {ready['load_s']} s, warm-up {ready['warmup_s']} s)"
    )

    # Back in the share: new connections split between the two workers again.
    with idle_connections(server, 8) as counts:
        assert set(counts) == {str(replacement["worker_pid"]), str(workers(server)[1]["worker_pid"])}, counts
        assert sorted(counts.values()) == [4, 5], counts
    assert server.stop() == 0, "\n".join(server.lines)


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"SERVER_MAX_RESTARTS": "-1"}, "--max-restarts (SERVER_MAX_RESTARTS): must be between 0 and 1000, got -1"),
        ({"SERVER_MAX_RESTARTS": "few"}, "--max-restarts (SERVER_MAX_RESTARTS): expected an integer, got 'few'"),
        (
            {"SERVER_RESTART_WINDOW_S": "0"},
            "--restart-window-s (SERVER_RESTART_WINDOW_S): must be between 1 and 86400, got 0",
        ),
    ],
)
def test_bad_restart_settings_exit_2_in_one_line(artifact, env, needle):
    result = run_script(SERVE, "--model-dir", str(artifact), env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"serve.py: error: {needle}"]


def test_a_worker_that_keeps_dying_stops_the_task_with_one_line_naming_it(artifact, start_server):
    server = start_server(
        artifact, env={**TWO_WORKERS, "SERVER_MAX_RESTARTS": "2", "SERVER_RESTART_WINDOW_S": "600"}, args=STANDIN
    )
    server.wait_ready()
    pid = workers(server)[1]["worker_pid"]
    for restarts in (1, 2):
        os.kill(pid, signal.SIGKILL)
        entry = restarted(server, pid)
        assert (entry["worker"], entry["restarts"], entry["visible_cores"]) == (1, restarts, "2-3")
        pid = entry["worker_pid"]
        ready_of(server, pid)
    os.kill(pid, signal.SIGKILL)
    assert server.proc.wait(60) == 1, "\n".join(server.lines)
    server.finish_reading()
    logs = server.logs()
    (line,) = [e for e in logs if e.get("msg") == "worker crash loop; stopping the others"]
    assert (line["worker"], line["visible_cores"], line["restarts"], line["window_s"], line["signal"]) == (
        1,
        "2-3",
        2,
        600,
        "SIGKILL",
    )
    assert line["level"] == "error"
    assert len([e for e in logs if e.get("msg") == "worker restarted"]) == 2
    assert not [e for e in logs if e.get("msg") == "worker failed while stopping"]  # worker 0 drained


def test_sigterm_while_a_worker_restarts_drains_and_exits_0_without_restarting_it(artifact, start_server):
    server = start_server(artifact, env={**TWO_WORKERS, "SERVER_WARMUP_ITERATIONS": "600"}, args=STANDIN)
    server.wait_ready()
    dead = workers(server)[0]["worker_pid"]
    os.kill(dead, signal.SIGKILL)
    replacement = restarted(server, dead)["worker_pid"]
    server.proc.send_signal(signal.SIGTERM)  # the replacement is still loading or warming up
    assert server.proc.wait(60) == 0, "\n".join(server.lines)
    server.finish_reading()
    logs = server.logs()
    messages = [e.get("msg") for e in logs]
    assert messages.count("worker restarted") == 1
    assert "worker failed while stopping" not in messages
    stop = messages.index("stopping workers")
    # It was restarting when the signal came: not ready before it.
    assert not [
        i for i, e in enumerate(logs) if e.get("msg") == "model ready" and e.get("pid") == replacement and i < stop
    ]
    assert logs[-1]["msg"] == "supervisor exiting" and logs[-1]["exit_code"] == 0


def test_a_packed_models_worker_is_restarted_and_the_container_stays_ready(packed_artifact):
    """alpha: two workers on 0-1, beta: one on 2-3 (test_neuron_packed.py's models). While alpha's worker 1 is
    restarted, its ready marker is replaced by a restarting one: alpha's port and /ping on both ports stay 200."""
    alpha_port, beta_port = free_ports(2)
    env = {
        "SERVER_MODELS": json.dumps(server_models(alpha_port, beta_port)),
        "SERVER_WARMUP_ITERATIONS": "600",
        "SERVER_METRICS": "off",
    }
    server = ServerProcess(packed_artifact, env=env, port=None, args=STANDIN)
    try:
        urls = {"alpha": f"http://127.0.0.1:{alpha_port}", "beta": f"http://127.0.0.1:{beta_port}"}
        wait_for(
            server,
            lambda e: len([x for x in server.logs() if x.get("msg") == "model ready"]) >= 3,
            "three ready workers",
            timeout=180,
        )
        dead = next(
            e
            for e in server.logs()
            if e.get("msg") == "worker started" and e.get("model") == "alpha" and e["worker"] == 1
        )
        os.kill(dead["worker_pid"], signal.SIGKILL)
        replacement = restarted(server, dead["worker_pid"])
        assert (replacement["model"], replacement["worker"], replacement["visible_cores"]) == ("alpha", 1, "1")
        probes = {
            "alpha_ready": requests.get(urls["alpha"] + "/v2/models/alpha/ready", timeout=10).status_code,
            "ping_alpha": requests.get(urls["alpha"] + "/ping", timeout=10).status_code,
            "ping_beta": requests.get(urls["beta"] + "/ping", timeout=10).status_code,
            "infer": requests.post(urls["alpha"] + "/v2/models/alpha/infer", json=TEXT, timeout=10).status_code,
        }
        asked = time.time()
        ready = ready_of(server, replacement["worker_pid"])
        # Asked while it warmed up (600 passes), answered by alpha's other worker: ready throughout.
        assert asked < wall(ready["ts"]), "the replacement was ready before the probes: nothing was observed"
        assert probes == {"alpha_ready": 200, "ping_alpha": 200, "ping_beta": 200, "infer": 200}
        assert requests.get(urls["beta"] + "/ping", timeout=10).status_code == 200
        assert server.stop() == 0, "\n".join(server.lines)
    finally:
        server.kill()


def test_a_vacated_slot_leaves_the_share_until_its_replacement_joins():
    from connection_share import AWAY, ConnectionShare, ShareTable

    table = ShareTable(2)
    try:
        # Each worker's view closes the fds that are not its own: give it copies, as a fork would.
        first, second = (ConnectionShare([os.dup(fd) for fd in table.fds], index) for index in (0, 1))
        first.add(3)
        second.add(1)
        assert second.my_turn() and not first.my_turn()
        table.vacate(0)  # the first died with 3 connections: they are gone, and it takes none while it restarts
        assert first.away and not second.away
        second.add(5)
        assert second.my_turn() and not first.my_turn()
        first.add(1)  # accepted while away (every other slot away too): counted after the join
        first.join()
        assert (first.mine, second.mine) == (1, 6) and first.my_turn() and not first.away
        assert os.read(first.wake_read_fd, 64) and os.read(second.wake_read_fd, 64)  # both woken to check their turn
        second.leave()
        assert second.mine == AWAY and first.my_turn()
    finally:
        table.close()


def test_a_worker_with_two_more_connections_than_another_hands_the_excess_over_after_their_replies():
    from connection_share import AWAY, ConnectionShare, ShareTable
    from http_server import HttpServer

    table = ShareTable(2)
    try:
        first, second = (ConnectionShare([os.dup(fd) for fd in table.fds], index) for index in (0, 1))
        busy = HttpServer(app=None, infer_routes={}, infer=None, max_body_bytes=1, share=first)
        first.add(5)
        second.add(2)
        # 5 against 2: two replies say "connection: close" (5 -> 3), then it keeps the rest.
        assert [busy.rebalance() for _ in range(4)] == [True, True, False, False]
        # Within one of each other nothing moves, whichever side asks.
        assert not HttpServer(app=None, infer_routes={}, infer=None, max_body_bytes=1, share=second).rebalance()
        table.vacate(1)  # the other worker died: its slot takes no connections, so none are handed to it
        fresh = HttpServer(app=None, infer_routes={}, infer=None, max_body_bytes=1, share=first)
        first.add(10)
        assert not fresh.rebalance()
        first.leave()  # draining: the accept side has stopped, and replies close anyway
        second.counts[1] = 0
        assert first.mine == AWAY and not fresh.rebalance()
        assert not HttpServer(app=None, infer_routes={}, infer=None, max_body_bytes=1).rebalance()  # one worker
    finally:
        table.close()


def test_after_a_restart_the_connections_that_moved_to_the_other_worker_come_back_without_a_failed_request(
    artifact, start_server
):
    server = start_server(artifact, env={**TWO_WORKERS, "SERVER_WARMUP_ITERATIONS": "300"}, args=STANDIN)
    server.wait_ready()
    dead, other = workers(server)[0], workers(server)[1]
    load = Load(server.url, clients=8)
    try:
        deadline = time.monotonic() + 30
        while len(load.results) < 50:
            assert time.monotonic() < deadline, "the load never got going"
            time.sleep(0.01)
        os.kill(dead["worker_pid"], signal.SIGKILL)
        replacement = restarted(server, dead["worker_pid"])
        ready = ready_of(server, replacement["worker_pid"])
        back = wall(ready["ts"])
        # The clients that lost their connection reconnected to the other worker while the replacement warmed
        # up: all 8 are there. Handed back with "connection: close" after a reply, they even out again.
        deadline, counts = time.monotonic() + 20, {}
        while time.monotonic() < deadline:
            counts = open_connections(server.url)  # this scrape's connection is on one of them
            if counts.get(str(replacement["worker_pid"]), 0) >= 3 and counts.get(str(other["worker_pid"]), 0) >= 3:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the connections never evened out: {counts}")
        time.sleep(0.3)
    finally:
        results = load.stop()
    after = [r for r in results if r.started > back]
    assert after and all(r.outcome == 200 for r in after), [(r.outcome, r.body) for r in after if r.outcome != 200]
    assert server.stop() == 0, "\n".join(server.lines)


def test_a_model_stays_ready_while_one_of_its_workers_restarts(tmp_path):
    from readiness import PackedReadiness, restarting_path

    readiness = PackedReadiness(tmp_path, {"alpha": 1, "beta": 2}, {"alpha": 2, "beta": 1})
    for index in (0, 1):
        readiness.mark_ready("alpha", index)
    readiness.mark_ready("beta", 0)
    assert readiness.not_ready() == []
    restarting_path(tmp_path, "alpha", 1).touch()  # the supervisor: restarting first, then the ready marker goes
    readiness.clear("alpha", 1)
    assert readiness.model_ready("alpha") and readiness.ready_workers("alpha") == 1
    restarting_path(tmp_path, "beta", 0).touch()  # a model's only worker: nobody serves it meanwhile
    readiness.clear("beta", 0)
    assert readiness.not_ready() == ["beta"]
    readiness.mark_ready("alpha", 1)  # the replacement, warm: its restarting marker goes with it
    assert not restarting_path(tmp_path, "alpha", 1).exists() and readiness.model_ready("alpha")
    readiness.clear("alpha", 0)  # a worker that is neither ready nor restarting: loading or draining
    assert not readiness.model_ready("alpha")
