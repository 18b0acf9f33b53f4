"""The suite's SMTP server (devservers/smtp_server.py) stops cleanly: a session a client left
open (a worker killed mid-session) is closed when the server stops, not left for the garbage
collector to report later as an unclosed socket in whatever test runs then."""

from __future__ import annotations

import gc
import socket
import warnings

from devservers.smtp_server import SmtpTestServer


def test_a_session_left_open_is_closed_when_the_server_stops(smtp_server: SmtpTestServer) -> None:
    """Given a client connected and greeted that never quits, when the server stops, then the
    client reads the end of the stream (the server closed its socket) and no unclosed socket of
    the server's port is reported."""
    client = socket.create_connection(("127.0.0.1", smtp_server.port), timeout=2)
    try:
        assert client.recv(512).startswith(b"220"), "the greeting"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            smtp_server.stop()
            gc.collect()
        try:
            end = client.recv(512)
        except TimeoutError:
            end = None
        assert end == b"", "the server closed the session"
        unclosed = [w for w in caught if f"{smtp_server.port}" in str(w.message)]
        assert unclosed == [], [str(w.message) for w in unclosed]
    finally:
        client.close()
