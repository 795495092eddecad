"""--workers N over real sockets: N processes share the DNS port (SO_REUSEPORT), one killed is restarted.

The supervisor forks N workers; each is a whole server with its own admin port
(--http-listen port + K) and metrics, so the test sees which worker answered by
its `coredns_dns_requests_total`. Queries come from many source ports (the
kernel spreads UDP over the workers by the sender's address). Worker 1 is then
killed with SIGKILL while a prober keeps asking: the supervisor starts it again,
the new process answers its share again, and the prober never goes without an
answer for long -- only the queries that were in the dead socket are lost.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
import urllib.request

import dns.message
import pytest

from testsupport.cases import MAIN, check, make_query
from testsupport.serverproc import FIXTURES, Server, eventually
from testsupport.testbed import free_port

WORKERS = 3


def free_ports(n: int) -> int:
    """The first of `n` consecutive loopback TCP ports free right now (worker K's admin port is the first + K)."""
    for _ in range(100):
        base = free_port()
        probes = []
        try:
            for k in range(1, n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(sock)
                sock.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def requests(http_port: int) -> float | None:
    """coredns_dns_requests_total of the worker serving its admin endpoints on `http_port` (None: not up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(v) for v in re.findall(r"^coredns_dns_requests_total\{[^}]*\} (\S+)$", text, re.M))


def spray(port: int, sockets: int = 64) -> int:
    """One query from each of `sockets` fresh source ports; returns how many were answered correctly."""
    ok = 0
    for _ in range(sockets):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            q = make_query(MAIN[0])
            sock.sendto(q.to_wire(), ("127.0.0.1", port))
            try:
                check(MAIN[0], dns.message.from_wire(sock.recv(4096)))
                ok += 1
            except OSError:
                pass
    return ok


def worker_pids(server: Server) -> dict[int, int]:
    """Worker index -> PID of its latest start, from the supervisor's log."""
    return {int(k): int(pid) for k, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", server.log())}


class Prober:
    """One query at a time, round-robin over 16 source ports, 0.5 s each: when each answer came, what was lost."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answered: list[float] = []
        self.lost: list[float] = []
        self.wrong = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
        try:
            for n in range(10**9):
                if self._stop.is_set():
                    return
                sock = socks[n % len(socks)]
                sock.settimeout(0.5)
                q = make_query(MAIN[0])
                sock.sendto(q.to_wire(), ("127.0.0.1", self.port))
                try:
                    while True:  # skip a late reply to an earlier query on this socket
                        reply = dns.message.from_wire(sock.recv(4096))
                        if reply.id == q.id:
                            break
                except OSError:
                    self.lost.append(time.monotonic())
                    continue
                try:
                    check(MAIN[0], reply)
                    self.answered.append(time.monotonic())
                except AssertionError:
                    self.wrong += 1
                time.sleep(0.005)
        finally:
            for sock in socks:
                sock.close()

    def __enter__(self) -> "Prober":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def test_workers_share_the_port_and_a_killed_one_is_restarted(tmp_path):
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("--workers needs SO_REUSEPORT")
    server = Server("--manifests", str(FIXTURES / "contract.yaml"), "--workers", str(WORKERS))
    server.http_port = free_ports(WORKERS)
    with server:
        admin = [server.http_port + k for k in range(WORKERS)]
        eventually(lambda: len(worker_pids(server)) == WORKERS and all(requests(p) is not None for p in admin),
                   timeout=30, what=lambda: f"{WORKERS} workers up\n{server.log()}")
        before = [requests(p) for p in admin]
        assert spray(server.dns_port, 96) == 96
        served = [requests(p) - b for p, b in zip(admin, before)]
        print(f"\nqueries answered per worker, 96 source ports: {served}")
        assert all(n > 0 for n in served), f"not every worker answered: {served}"

        pids = worker_pids(server)
        victim = pids[1]
        with Prober(server.dns_port) as prober:
            time.sleep(1.0)
            killed_at = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            eventually(lambda: worker_pids(server).get(1, victim) != victim and requests(admin[1]) is not None,
                       timeout=30, what=lambda: f"worker 1 restarted\n{server.log()}")
            restarted = time.monotonic() - killed_at
            time.sleep(1.0)
        new_pid = worker_pids(server)[1]
        assert "worker 1 exited with -9; starting it again" in server.log()
        assert new_pid != victim and os.path.exists(f"/proc/{new_pid}")
        # The restarted worker answers its share again (its own counter grows), the others still do.
        before = [requests(p) for p in admin]
        assert spray(server.dns_port, 96) == 96
        served = [requests(p) - b for p, b in zip(admin, before)]
        # Meanwhile the port never went silent: answers kept coming while worker 1 was dead and restarting.
        during = [t for t in prober.answered if t >= killed_at]
        gaps = [b - a for a, b in zip([killed_at] + during, during)]
        print(f"worker 1 (pid {victim}) killed; restarted as pid {new_pid} and serving within {restarted:.1f}s; "
              f"prober: {len(prober.answered)} answered, {len(prober.lost)} lost, {prober.wrong} wrong, longest gap "
              f"{max(gaps):.2f}s; per worker afterwards: {served}")
        assert prober.wrong == 0
        assert all(n > 0 for n in served), f"not every worker answered after the restart: {served}"
        assert len(prober.lost) <= 2, f"{len(prober.lost)} queries lost: more than the ones in the dead worker's socket"
        assert max(gaps) < 1.0, "the surviving workers stopped answering"
        assert {k: worker_pids(server)[k] for k in (0, 2)} == {k: pids[k] for k in (0, 2)}, "a surviving worker was restarted"
