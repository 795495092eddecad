"""--workers N over real sockets: one supervisor watches and compiles, N forked workers answer.

The workers share the DNS port (SO_REUSEPORT); the supervisor serves the one
admin port, whose /metrics labels each worker's query counters with `worker`,
so the test sees which worker answered. Queries come from many source ports
(the kernel spreads UDP over the workers by the sender's address). A worker is
killed with SIGKILL while a prober keeps asking: the supervisor forks it again,
the new process answers its share, and the prober never goes without an answer
for long -- only the queries that were in the dead socket are lost. A change
(a re-read manifest, an API write) reaches every worker's answers, and the API
server sees one watch per resource whatever the worker count.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import dns.message
import pytest

from kube_server import MCS, KubeServer, ensure_crd, fqdn, service_import
from test_monitoring import promtool
from testsupport.cases import MAIN, check, make_query
from testsupport.mcsdnsserver import FIXTURES, McsdnsServer, http_get
from testsupport.polling import eventually

WORKERS = 3


def requests(http_port: int) -> dict[int, float] | None:
    """coredns_dns_requests_total per worker, from the supervisor's /metrics (None: not up)."""
    try:
        status, text = http_get(http_port, "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    per: dict[int, float] = {}
    for labels, value in re.findall(r"^coredns_dns_requests_total\{([^}]*)\} (\S+)$", text, re.M):
        worker = re.search(r'worker="(\d+)"', labels)
        if worker:
            per[int(worker.group(1))] = per.get(int(worker.group(1)), 0.0) + float(value)
    return per


def served(http_port: int, before: dict[int, float], workers: int) -> list[float]:
    """Requests each worker counted since `before`."""
    now = requests(http_port) or {}
    return [now.get(k, 0.0) - before.get(k, 0.0) for k in range(workers)]


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


def worker_pids(server: McsdnsServer) -> dict[int, int]:
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
    server = McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--workers", str(WORKERS))
    with server:
        admin = server.http_port
        eventually(lambda: len(worker_pids(server)) == WORKERS and server.http("/ready")[0] == 200,
                   timeout=30, what=lambda: f"{WORKERS} workers up\n{server.log()}")
        assert server.http("/ready")[0] == 200
        # One manifest reader for the pod: the supervisor's (the workers got its table with the fork).
        assert server.log().count("loaded 19 objects") == 1, server.log()
        before = requests(admin)
        assert spray(server.dns_port, 96) == 96
        per_worker = served(admin, before, WORKERS)
        print(f"\nqueries answered per worker, 96 source ports: {per_worker}")
        assert all(n > 0 for n in per_worker), f"not every worker answered: {per_worker}"

        pids = worker_pids(server)
        victim = pids[1]
        with Prober(server.dns_port) as prober:
            time.sleep(1.0)
            killed_at = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            eventually(lambda: worker_pids(server).get(1, victim) != victim and server.http("/ready")[0] == 200,
                       timeout=30, what=lambda: f"worker 1 restarted\n{server.log()}")
            restarted = time.monotonic() - killed_at
            time.sleep(1.0)
        new_pid = worker_pids(server)[1]
        assert "worker 1 exited with -9; starting it again" in server.log()
        assert new_pid != victim and os.path.exists(f"/proc/{new_pid}")
        # The restarted worker answers its share again (its own counter grows), the others still do.
        before = requests(admin)
        assert spray(server.dns_port, 96) == 96
        per_worker = served(admin, before, WORKERS)
        # Meanwhile the port never went silent: answers kept coming while worker 1 was dead and restarting.
        during = [t for t in prober.answered if t >= killed_at]
        gaps = [b - a for a, b in zip([killed_at] + during, during)]
        print(f"worker 1 (pid {victim}) killed; restarted as pid {new_pid} and serving within {restarted:.1f}s; "
              f"prober: {len(prober.answered)} answered, {len(prober.lost)} lost, {prober.wrong} wrong, longest gap "
              f"{max(gaps):.2f}s; per worker afterwards: {per_worker}")
        assert prober.wrong == 0
        assert all(n > 0 for n in per_worker), f"not every worker answered after the restart: {per_worker}"
        assert len(prober.lost) <= 2, f"{len(prober.lost)} queries lost: more than the ones in the dead worker's socket"
        assert max(gaps) < 1.0, "the surviving workers stopped answering"
        assert {k: worker_pids(server)[k] for k in (0, 2)} == {k: pids[k] for k in (0, 2)}, "a surviving worker was restarted"
        assert server.log().count("loaded 19 objects") == 1, "a restarted worker read the manifests itself"
        assert server.stop() == 0


def soa_serials(port: int, sockets: int = 48) -> set[int]:
    """The apex SOA serial answered to each of `sockets` fresh source ports (so every worker is asked)."""
    serials = set()
    for _ in range(sockets):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            sock.sendto(dns.message.make_query("clusterset.local.", "SOA").to_wire(), ("127.0.0.1", port))
            reply = dns.message.from_wire(sock.recv(4096))
            serials.add(reply.answer[0][0].serial)
    return serials


def answers(port: int, name: str, sockets: int = 48) -> set[tuple[str, ...]]:
    """The A records answered for `name` to each of `sockets` fresh source ports, as a set of sorted tuples."""
    seen = set()
    for _ in range(sockets):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            sock.sendto(dns.message.make_query(name, "A").to_wire(), ("127.0.0.1", port))
            try:
                reply = dns.message.from_wire(sock.recv(4096))
            except OSError:
                seen.add(("lost",))
                continue
            seen.add(tuple(sorted(r.address for rrset in reply.answer for r in rrset)))
    return seen


def test_a_reread_manifest_reaches_every_worker(tmp_path):
    """SIGHUP makes the supervisor re-read the file; every worker then answers the new address and the same SOA serial."""
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("--workers needs SO_REUSEPORT")
    manifests = tmp_path / "contract.yaml"
    text = (FIXTURES / "contract.yaml").read_text()
    manifests.write_text(text)
    name = MAIN[0].qname
    with McsdnsServer("--manifests", str(manifests), "--workers", "2") as server:
        assert server.http("/ready")[0] == 200 and len(worker_pids(server)) == 2
        assert answers(server.dns_port, name) == {("10.0.0.1",)}
        assert "ips:\n  - 10.0.0.1\n" in text
        manifests.write_text(text.replace("ips:\n  - 10.0.0.1\n", "ips:\n  - 10.0.0.99\n", 1))
        server.signal(signal.SIGHUP)
        before = requests(server.http_port)
        eventually(lambda: answers(server.dns_port, name) == {("10.0.0.99",)}, timeout=15,
                   what=lambda: f"every worker answers 10.0.0.99: {answers(server.dns_port, name)}\n{server.log()}")
        per_worker = served(server.http_port, before, 2)
        assert all(n > 0 for n in per_worker), f"not every worker was asked: {per_worker}"
        serials = soa_serials(server.dns_port)
        assert len(serials) == 1, f"the workers answer different SOA serials: {serials}"
        assert server.log().count("worker 0 started") == 1, "a worker was restarted to take the change"
        # One /metrics for the pod: CoreDNS's names, the workers' series apart by `worker`, valid exposition.
        status, text = server.http("/metrics")
        assert status == 200
        for k in (0, 1):
            assert re.search(rf'^coredns_dns_requests_total\{{[^}}]*worker="{k}"', text, re.M), text
        assert re.search(r"^coredns_build_info\{", text, re.M) and re.search(r"^mcsdns_synced 1", text, re.M)
        lint = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert lint.returncode == 0, lint.stdout + lint.stderr


def watches(testbed, resource: str) -> float:
    """WATCH requests the API server holds open for `resource` now (apiserver_longrunning_requests)."""
    text = testbed.api.request("GET", "/metrics")
    return sum(float(v) for labels, v in re.findall(r"^apiserver_longrunning_requests\{([^}]*)\} (\S+)$", text, re.M)
               if f'resource="{resource}"' in labels and 'verb="WATCH"' in labels)


@pytest.mark.kube
def test_workers_hold_one_watch_and_every_worker_follows_the_api(testbed, fresh_namespace, tmp_path):
    """Through a real kube-apiserver: --workers 2 opens one watch per resource (not one per worker), an API
    write reaches both workers' answers, and a worker killed with SIGKILL comes back with the current state."""
    ensure_crd(testbed)
    ns = fresh_namespace
    resources = ("serviceimports", "endpointslices")
    base = {r: watches(testbed, r) for r in resources}
    vip = fqdn("vip", ns)
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--workers", "2") as server:
        server.wait_until_ready()
        opened = lambda: {r: watches(testbed, r) - base[r] for r in resources}  # noqa: E731
        eventually(lambda: opened() == dict.fromkeys(resources, 1.0), timeout=15,
                   what=lambda: f"one watch per resource: {opened()}\n{server.tail()}")

        testbed.create(service_import(ns, "vip", ["10.9.0.1"]))
        before = requests(server.http_port)
        eventually(lambda: answers(server.dns_port, vip) == {("10.9.0.1",)}, timeout=15,
                   what=lambda: f"both workers answer 10.9.0.1: {answers(server.dns_port, vip)}\n{server.tail()}")
        per_worker = served(server.http_port, before, 2)
        assert all(n > 0 for n in per_worker), f"not every worker was asked: {per_worker}"

        victim = worker_pids(server)[0]
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: worker_pids(server)[0] != victim and server.ready()[0] == 200, timeout=15,
                   what=lambda: f"worker 0 restarted\n{server.tail()}")
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}})
        before = requests(server.http_port)
        eventually(lambda: answers(server.dns_port, vip) == {("10.9.0.2",)}, timeout=15,
                   what=lambda: f"both workers answer 10.9.0.2: {answers(server.dns_port, vip)}\n{server.tail()}")
        per_worker = served(server.http_port, before, 2)
        assert all(n > 0 for n in per_worker), f"not every worker was asked after the restart: {per_worker}"
        assert opened() == dict.fromkeys(resources, 1.0), "the restart opened a watch of its own"
        server.shutdown()


def test_workers_stop_when_the_supervisor_is_killed(tmp_path):
    """No orphan keeps the port with a table nobody updates: a worker whose supervisor died exits."""
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("--workers needs SO_REUSEPORT")
    with McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--workers", "2") as server:
        pids = list(worker_pids(server).values())
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
        server.proc.kill()
        server.proc.wait(5)

        def gone(pid: int) -> bool:
            try:
                os.waitpid(pid, os.WNOHANG)  # not our child: ChildProcessError; zombie reaped by init
            except ChildProcessError:
                pass
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return True
            return state == "Z"

        eventually(lambda: all(gone(p) for p in pids), timeout=10, what=lambda: f"workers {pids} exited\n{server.log()}")
        assert "the supervisor is gone; stopping" in server.log()


def test_workers_that_cannot_bind_stop_the_server_with_exit_1():
    """A DNS port taken by another program: every worker fails to bind, the supervisor exits 1 at once
    (not a restart loop); --listen port 0 (each worker would get its own port) is refused with exit 2."""
    base = [sys.executable, "-m", "mcsdns", "serve", "--workers", "2", "--http-listen", "127.0.0.1:0",
            "--manifests", str(FIXTURES / "contract.yaml"), "--lameduck", "0", "--upstream", "none"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(base + ["--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"--listen 127.0.0.1:{port} (DNS over UDP and TCP): Address already in use" in done.stderr, done.stderr
    assert "stopping every worker" in done.stderr
    assert "starting it again" not in done.stderr
    done = subprocess.run(base + ["--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--workers needs fixed --listen ports" in done.stderr, done.stderr
