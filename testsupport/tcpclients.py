"""TCP clients that misbehave, and one that checks: shared by tests/test_overload.py and
benchmarks/tcp_hold.py (docs/reliability.md).

`hold` keeps thousands of connections open to a DNS server (silent, half a length prefix, a prefix that
lies, or queries pipelined and never read), from one loopback address or many, reopening every one the
server closes. `probe` meanwhile asks over TCP (a new connection per query, as a resolver retrying a
truncated answer) and over UDP, and reports how many answers came within DEADLINE.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import resource
import selectors
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import dns.message
import dns.query
import dns.rdatatype

QNAME = "db.demo.svc.clusterset.local."
QTYPE = "SRV"
PROBES_PER_SECOND = 20  # per protocol
DEADLINE = 1.0  # seconds: an answer later than this counts as a failure
# What each held connection sends, in turn: nothing, half a length prefix, a prefix that lies.
PAYLOADS = (b"", b"\x00", struct.pack(">H", 4000) + b"\x00" * 10)


def source_address(i: int, sources: int) -> str | None:
    """Connection i's source: None (127.0.0.1) with one source, else one of `sources` in 127.10.0.0/16."""
    if sources <= 1:
        return None
    k = i % sources
    return f"127.10.{k // 250}.{k % 250 + 1}"


def raise_open_files(want: int) -> int:
    """Raise this process's soft open-file limit towards `want` (the hard limit caps it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# --------------------------------------------------------------------------- the holder


def pipelined(count: int = 100) -> bytes:
    """`count` framed queries for QNAME SRV in one write (for --mode pipeline: asked, never read)."""
    wire = dns.message.make_query(QNAME, QTYPE, use_edns=False).to_wire()
    return (struct.pack(">H", len(wire)) + wire) * count


def hold(server: tuple[str, int], connections: int, sources: int, seconds: float, report: Any,
         payloads: tuple[bytes, ...] = PAYLOADS) -> None:
    """Keep `connections` connections open to `server` for `seconds`, reopening any the server closes.
    Puts ("up", seconds to establish) once they are, then the final counts (a dict) on `report`."""
    raise_open_files(connections + 256)
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "connect_errors": 0, "open_samples": []}
    state: dict[socket.socket, tuple[int, bool]] = {}  # socket -> (index, connected)

    def open_one(i: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        src = source_address(i, sources)
        try:
            if src is not None:
                sock.bind((src, 0))
            err = sock.connect_ex(server)
        except OSError:
            err = -1
        if err not in (0, errno.EINPROGRESS):
            stats["connect_errors"] += 1
            sock.close()
            return
        stats["opened"] += 1
        state[sock] = (i, False)
        sel.register(sock, selectors.EVENT_WRITE)

    started = time.monotonic()
    for i in range(connections):
        open_one(i)
    announced = False
    deadline = started + seconds
    last_sample = 0.0
    pending_reopen: list[int] = []
    while time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.05):
            sock = key.fileobj
            i, connected = state[sock]  # type: ignore[index]
            if not connected:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):  # type: ignore[union-attr]
                    stats["connect_errors"] += 1
                    sel.unregister(sock)
                    del state[sock]  # type: ignore[arg-type]
                    sock.close()  # type: ignore[union-attr]
                    pending_reopen.append(i)
                    continue
                state[sock] = (i, True)  # type: ignore[index]
                payload = payloads[i % len(payloads)]
                try:
                    if payload:
                        sock.send(payload)  # type: ignore[union-attr]
                except OSError:
                    pass
                sel.modify(sock, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                continue  # (nothing is asked, so nothing should come; read and ignore)
            stats["closed_by_server"] += 1
            sel.unregister(sock)
            del state[sock]  # type: ignore[arg-type]
            sock.close()  # type: ignore[union-attr]
            pending_reopen.append(i)
        while pending_reopen:
            open_one(pending_reopen.pop())
        now = time.monotonic()
        connected = sum(1 for _, up in state.values() if up)
        if not announced and (connected >= connections or now - started > 10):
            report.put(("up", now - started, connected))
            announced = True
        if announced and now - last_sample >= 0.5:
            stats["open_samples"].append(connected)
            last_sample = now
    for sock in list(state):
        sock.close()
    samples = sorted(stats.pop("open_samples")) or [0]
    stats["held_median"] = samples[len(samples) // 2]
    stats["held_min"] = samples[0]
    report.put(("done", stats))


# --------------------------------------------------------------------------- the prober


def probe_once(port: int, tcp: bool, qname: str = QNAME, qtype: str = QTYPE) -> float | None:
    """Seconds until an answer holding `qtype` records, None if none within DEADLINE."""
    q = dns.message.make_query(qname, qtype)
    started = time.monotonic()
    try:
        if tcp:
            reply = dns.query.tcp(q, "127.0.0.1", port=port, timeout=DEADLINE)
        else:
            reply = dns.query.udp(q, "127.0.0.1", port=port, timeout=DEADLINE)
    except Exception:
        return None
    took = time.monotonic() - started
    if took > DEADLINE or not any(r.rdtype == dns.rdatatype.from_text(qtype) for r in reply.answer):
        return None
    return took


def probe(port: int, seconds: float, qname: str = QNAME, qtype: str = QTYPE) -> dict[str, Any]:
    """PROBES_PER_SECOND TCP and UDP queries a second for `seconds`: counts and latencies per protocol."""
    results: dict[str, list] = {"tcp": [], "udp": []}
    lock = threading.Lock()

    def one(proto: str) -> None:
        took = probe_once(port, proto == "tcp", qname, qtype)
        with lock:
            results[proto].append(took)

    with ThreadPoolExecutor(max_workers=64) as pool:
        start = time.monotonic()
        n = int(seconds * PROBES_PER_SECOND)
        for k in range(n):
            delay = start + k / PROBES_PER_SECOND - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, "tcp")
            pool.submit(one, "udp")
    out: dict[str, Any] = {}
    for proto, values in results.items():
        ok = sorted(v for v in values if v is not None)
        out[proto] = {
            "sent": len(values),
            "answered": len(ok),
            "answered_pct": round(100.0 * len(ok) / len(values), 2) if values else 0.0,
            "p50_ms": round(1000 * ok[len(ok) // 2], 1) if ok else None,
            "p99_ms": round(1000 * ok[min(len(ok) - 1, int(len(ok) * 0.99))], 1) if ok else None,
            "max_ms": round(1000 * ok[-1], 1) if ok else None,
        }
    return out


def attack(server: tuple[str, int], connections: int, sources: int, seconds: float,
           payloads: tuple[bytes, ...] = PAYLOADS, qname: str = QNAME, qtype: str = QTYPE,
           beside: Callable[[threading.Event], None] | None = None) -> dict[str, Any]:
    """`hold` in a process of its own against `server`; once its connections are up, `probe` for
    `seconds`, with `beside(stop)` running in a thread meanwhile (until `stop` is set). The holder's
    start and final counts, and the probe's figures."""
    ctx = mp.get_context("fork")
    report = ctx.Queue()
    holder = ctx.Process(target=hold, args=(server, connections, sources, seconds + 12, report, payloads), daemon=True)
    holder.start()
    stop = threading.Event()
    side = threading.Thread(target=beside, args=(stop,), daemon=True) if beside is not None else None
    try:
        _, up_after, connected = report.get(timeout=30)
        if side is not None:
            side.start()
        try:
            probed = probe(server[1], seconds, qname, qtype)
        finally:
            stop.set()
            if side is not None:
                side.join()
        _, held = report.get(timeout=seconds + 40)
    finally:
        holder.join(10)
        if holder.is_alive():
            holder.kill()
    return {"holder_up_after_s": round(up_after, 2), "holder_connected_at_start": connected, **held, **probed}
