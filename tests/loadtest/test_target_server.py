"""tests/support/threaded_server.py, the load tests' target: a client that goes away is not an error worth printing,
and a handler thread that outlives its test prints nothing into the next test's stderr; a handler's own bug
during its test is still printed."""

from __future__ import annotations

import http.client
import threading

from tests.support.threaded_server import JsonHandler, serving


def test_only_a_handler_s_own_error_during_its_test_is_printed(capfd):
    release, began, finished = threading.Event(), threading.Event(), threading.Event()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            try:
                if self.path == "/gone":
                    raise ConnectionResetError("the client went away")
                if self.path == "/late":  # still running after the block below has ended
                    began.set()
                    release.wait(30)
                    raise ValueError("a bug, but its test is over")
                raise ValueError("a bug in the handler")
            finally:
                finished.set()

    def get(port: int, path: str) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", path)
        try:
            connection.getresponse()
        except (http.client.HTTPException, OSError):
            pass  # the handler raised: the server closed the connection
        connection.close()

    with serving(Handler) as port:
        for path in ("/gone", "/bug"):
            finished.clear()
            get(port, path)
            finished.wait(30)
        finished.clear()
        late = threading.Thread(target=get, args=(port, "/late"))
        late.start()
        assert began.wait(30)
    release.set()
    assert finished.wait(30)
    late.join(30)
    err = capfd.readouterr().err
    assert "a bug in the handler" in err
    assert "the client went away" not in err and "its test is over" not in err
