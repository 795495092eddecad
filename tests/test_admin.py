"""The admin listener (/health, /ready, /metrics, /imports, /explain) against hostile clients (issue 12),
over real sockets: many idle and half-sent connections (slowloris), oversized and garbage requests,
and shutdown with connections still open.
"""

from __future__ import annotations

import random
import socket
import sys
import time

from testsupport.mcsdnsserver import McsdnsServer

from testsupport.polling import eventually

PROBE_TIMEOUT = 1.0  # a kubelet probe's default timeoutSeconds
CAP = 128  # admin.MAX_CONNECTIONS
READ_TIMEOUT = 5.0  # admin.READ_TIMEOUT


def probe(port: int, path: str = "/ready", timeout: float = PROBE_TIMEOUT) -> tuple[int, bytes]:
    """GET `path` as a probe does: connect, send, read to the end, all within `timeout` seconds in total."""
    deadline = time.monotonic() + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"probe of {path} took longer than {timeout}s")
        return remaining

    with socket.create_connection(("127.0.0.1", port), timeout=left()) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.34\r\n\r\n".encode())
        data = b""
        while True:
            sock.settimeout(left())
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def raw(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    """Send `payload` and end the sending side, read until the server closes; the response bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already reset by the server (an oversized head)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        return data


def closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset: cut by the server


def limited_server(nofile: int) -> McsdnsServer:
    """`mcsdns serve` with at most `nofile` open files: a slowloris client without a cap would exhaust them."""
    s = McsdnsServer()
    s.argv = [sys.executable, "-c",
              f"import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
              "from mcsdns.cli import main; sys.exit(main(sys.argv[1:]))",
              "serve", "--listen", f"127.0.0.1:{s.dns_port}", "--http-listen", f"127.0.0.1:{s.http_port}",
              "--lameduck", "0", "--upstream", "none"]  # fmt: skip
    return s


def test_slowloris_does_not_delay_ready_probes():
    # 2000 connections against 1024 file descriptors: only the connection cap keeps the server accepting.
    # Beyond the cap, descriptors pass it for a moment by up to a few accept bursts of BACKLOG each (the
    # accept, asyncio's transport task, connection_made, the evicted socket's close: one loop iteration
    # apart), so the limit leaves room for CAP + 4 x BACKLOG and the server's own descriptors.
    with limited_server(1024) as s:
        socks: list[socket.socket] = []
        try:
            for i in range(2000):  # idle ones and ones that sent half a request head
                sock = socket.create_connection(("127.0.0.1", s.http_port), timeout=10)
                if i % 2:
                    sock.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n")
                socks.append(sock)
            # The cap holds: the server cut all but at most CAP of them.
            eventually(lambda: sum(closed_by_server(sock) for sock in socks) >= len(socks) - CAP, 5,
                       what="the server cut the connections over its cap")  # fmt: skip
            for round_ in range(20):
                assert probe(s.http_port) == (200, b"OK")
                for sock in socks[1::2][round_ * 10 : round_ * 10 + 10]:  # the slow ones keep trickling
                    try:
                        sock.send(b"X")
                    except OSError:
                        pass
            assert probe(s.http_port, "/health") == (200, b"OK")
            assert probe(s.http_port, "/metrics")[0] == 200
        finally:
            for sock in socks:
                sock.close()
        assert "Traceback" not in s.log() and "Too many open files" not in s.log()


def test_a_request_head_must_arrive_within_the_read_timeout():
    with McsdnsServer() as s, socket.create_connection(("127.0.0.1", s.http_port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /ready HTTP/1.1\r\n")
        while time.monotonic() - started < READ_TIMEOUT + 5:  # one byte every 200 ms never completes the head
            try:
                sock.sendall(b"X")
            except OSError:
                break
            if closed_by_server(sock):
                break
            sock.setblocking(True)
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        assert READ_TIMEOUT - 0.5 <= elapsed < READ_TIMEOUT + 5, f"connection closed after {elapsed:.1f}s"


def test_oversized_and_garbage_requests():
    with McsdnsServer() as s:
        port = s.http_port
        big_header = b"GET /ready HTTP/1.1\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n"
        assert raw(port, big_header).startswith(b"HTTP/1.1 431 ")
        assert raw(port, b"GET /" + b"a" * 20000).startswith(b"HTTP/1.1 431 ")  # no end of line at all
        assert raw(port, b"GET\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(port, b"GET /ready\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(port, b"GET ready HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(port, b"POST /ready HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert raw(port, b"GET /nothing HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        head = raw(port, b"HEAD /health HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
        rng = random.Random(7)
        for _ in range(200):
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            reply = raw(port, junk + (b"\r\n\r\n" if rng.random() < 0.5 else b""))
            assert reply == b"" or reply.startswith(b"HTTP/1.1 4"), reply[:80]
        assert probe(port) == (200, b"OK")
        assert s.proc is not None and s.proc.poll() is None
        assert "Traceback" not in s.log() and "admin request failed" not in s.log()


def test_shutdown_with_connections_open_is_prompt():
    s = McsdnsServer().start()
    socks = [socket.create_connection(("127.0.0.1", s.http_port), timeout=5) for _ in range(50)]
    socks[0].sendall(b"GET /ready HTTP/1.1\r\n")  # one half-sent request
    try:
        started = time.monotonic()
        assert s.stop() == 0
        assert time.monotonic() - started < 5, "the drain is bounded (2 s) and --lameduck is 0"
        assert all(closed_by_server(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    assert "Traceback" not in s.log()

