"""Soak checker and UDP flood generator for mcsdns (docs/reliability.md): `python -m benchmarks.soak soak|flood ...`.

soak   The checker knows the expected state because it makes every change
       itself. It starts mcsdns (or uses --server/--pid), writes an initial
       state, measures the maximum query rate, then for --duration sends a
       steady query mix at --rate-fraction of that maximum while changing one
       service every --update-interval (ClusterSetIP address, headless
       endpoint set, an import that comes and goes).

       The maximum is the highest open-loop rate that loses under 0.1% of
       its queries under the soak's own conditions (the same senders, every
       answer checked, the updates running): a closed-loop probe gives a
       rough capacity C, then rate steps of --step-seconds start at
       --search-start x C and bisect between the best passing rate and the
       lowest failing one (as benchmarks/load.py). --search-steps 0 takes C
       itself; --rate skips both and sends at a fixed rate.

       Every answer is checked against the state that was current when it
       was asked, allowing --allowed-delay for propagation: an answer is
       right if it equals the answer of a state written before the reply
       arrived and replaced no earlier than allowed-delay before the query
       was sent. It reports queries sent, answered, wrong, lost, the
       propagation delay it saw, the server's RSS over the run, and the CPU
       the checker's senders and the server spent per 1 000 queries, as text
       and one JSON line.

       Changes go to a manifests directory (default; mcsdns polls it) or to a
       Kubernetes API (--kubeconfig, or --testbed to start the repository's
       etcd + kube-apiserver testbed).

flood  N processes send a packet mix (valid queries, random names and
       types, garbage) to HOST:PORT, as fast as they can or paced at --rate
       packets per second in all, bounded by --seconds and --max-packets,
       optionally pinned to --cpu; prints one JSON line with what was sent.

Both run on loopback and need nothing but the repository's dependencies.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcsdns.serve import mmsg
from testsupport.objects import MCS, endpoint, endpoint_slice, namespace, service_import
from testsupport.mcsdnsserver import ROOT, McsdnsServer
from testsupport.testbed import ApiError, KubeClient, Testbed

from . import provenance  # date, commit and machine of a stored result

RESULTS = ROOT / "benchmarks" / "results"  # --save: soak-manifests.json, soak-api.json

ZONE = "clusterset.local"
NAMESPACE = "soak"
CLUSTER = "c1"
HEADER = struct.Struct(">HHHHHH")
A, AAAA, TXT, SRV = 1, 28, 16, 33
SOCKETS_PER_SENDER = 4  # more source ports: 4 x 65536 IDs before one could be reused within the timeout
MAX_LAG = 0.05  # seconds: a sender further behind its open-loop schedule skips queries rather than burst them


# =========================================================================== the model


@dataclass(frozen=True)
class Model:
    """What the checker serves: `vips` ClusterSetIP imports, `headless` ones with 1..`endpoints` endpoints,
    one import that comes and goes, one that never changes, and a name that never exists."""

    vips: int = 4
    headless: int = 4
    endpoints: int = 4

    def keys(self) -> list[str]:
        return [f"vip{i}" for i in range(self.vips)] + [f"hdl{i}" for i in range(self.headless)] + ["toggle"]

    # Values: each key's state is an integer version; these turn it into objects and answers.

    @staticmethod
    def vip_ip(i: int, v: int) -> str:
        return f"10.201.{i}.{v % 250 + 1}"

    def hdl_addresses(self, i: int, v: int) -> list[str]:
        count = 1 + v % self.endpoints
        return [f"10.202.{i}.{(v * self.endpoints + j) % 250 + 1}" for j in range(count)]

    @staticmethod
    def toggle_present(v: int) -> bool:
        return v % 2 == 0

    # ---------------------------------------------------------------- objects

    def import_obj(self, name: str, ips: list[str] | None, headless: bool, api_version: str) -> dict:
        return service_import(NAMESPACE, name, ips, headless=headless, api_version=api_version)

    def slice_obj(self, i: int, v: int) -> dict:
        return endpoint_slice(NAMESPACE, f"hdl{i}-{CLUSTER}", f"hdl{i}", CLUSTER,
                              [endpoint([ip], f"h{j}") for j, ip in enumerate(self.hdl_addresses(i, v))])

    def objects(self, state: dict[str, int], api_version: str) -> list[dict]:
        out: list[dict] = [namespace(NAMESPACE)]
        out.append(self.import_obj("static", ["10.204.0.1"], False, api_version))
        for i in range(self.vips):
            out.append(self.import_obj(f"vip{i}", [self.vip_ip(i, state[f"vip{i}"])], False, api_version))
        for i in range(self.headless):
            out.append(self.import_obj(f"hdl{i}", None, True, api_version))
            out.append(self.slice_obj(i, state[f"hdl{i}"]))
        if self.toggle_present(state["toggle"]):
            out.append(self.import_obj("toggle", ["10.203.0.1"], False, api_version))
        return out

    # ---------------------------------------------------------------- queries and answers

    def queries(self) -> list[tuple[str, str, int]]:
        """(key or "" for constant answers, name, qtype): the query mix, one of each per round."""
        out: list[tuple[str, str, int]] = []
        for i in range(self.vips):
            name = f"vip{i}.{NAMESPACE}.svc.{ZONE}."
            out += [(f"vip{i}", name, A), (f"vip{i}", name, SRV), (f"vip{i}", name, AAAA), (f"vip{i}", name, A)]
        for i in range(self.headless):
            name = f"hdl{i}.{NAMESPACE}.svc.{ZONE}."
            out += [(f"hdl{i}", name, A), (f"hdl{i}", name, SRV), (f"hdl{i}", f"h0.{CLUSTER}.{name}", A)]
        out += [("toggle", f"toggle.{NAMESPACE}.svc.{ZONE}.", A), ("", f"static.{NAMESPACE}.svc.{ZONE}.", A),
                ("", f"missing.{NAMESPACE}.svc.{ZONE}.", A), ("", f"dns-version.{ZONE}.", TXT)]
        return out

    def expected(self, key: str, name: str, qtype: int, v: int) -> tuple:
        """The canonical reply (rcode, answer lines, additional lines) for `key` at version `v`."""
        if key == "":
            if name.startswith("static."):
                return ("NOERROR", frozenset({f"{name} A 10.204.0.1"}), frozenset())
            if name.startswith("missing."):
                return ("NXDOMAIN", frozenset(), frozenset())
            return ("NOERROR", frozenset({f'{name} TXT "1.1.0"'}), frozenset())
        if key == "toggle":
            if self.toggle_present(v):
                return ("NOERROR", frozenset({f"{name} A 10.203.0.1"}), frozenset())
            return ("NXDOMAIN", frozenset(), frozenset())
        i = int(key[3:])
        if key.startswith("vip"):
            ip = self.vip_ip(i, v)
            if qtype == A:
                return ("NOERROR", frozenset({f"{name} A {ip}"}), frozenset())
            if qtype == AAAA:
                return ("NOERROR", frozenset(), frozenset())
            return ("NOERROR", frozenset({f"{name} SRV 0 100 80 {name}"}), frozenset({f"{name} A {ip}"}))
        addresses = self.hdl_addresses(i, v)
        if name.startswith("h0."):
            return ("NOERROR", frozenset({f"{name} A {addresses[0]}"}), frozenset())
        if qtype == A:
            return ("NOERROR", frozenset(f"{name} A {ip}" for ip in addresses), frozenset())
        weight = max(1, 100 // len(addresses))
        targets = [f"h{j}.{CLUSTER}.{name}" for j in range(len(addresses))]
        return ("NOERROR", frozenset(f"{name} SRV 0 {weight} 80 {t}" for t in targets),
                frozenset(f"{t} A {ip}" for t, ip in zip(targets, addresses)))


def query_wire(name: str, qtype: int) -> bytes:
    labels = [x for x in name.rstrip(".").split(".")]
    wire = b"".join(bytes([len(x)]) + x.encode() for x in labels) + b"\x00"
    opt = b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0)  # EDNS 1232: every answer of the mix fits
    return HEADER.pack(0, 0x0100, 1, 0, 0, 1) + wire + struct.pack(">HH", qtype, 1) + opt


def canonical(reply: bytes) -> tuple:
    """(rcode, answer lines, additional lines) of a reply, lower-cased owners; TC replies are marked."""
    import dns.message
    import dns.rcode

    msg = dns.message.from_wire(reply)

    def lines(section) -> frozenset:
        return frozenset(f"{rrset.name.to_text().lower()} {dns_type(rrset.rdtype)} {rd.to_text()}" for rrset in section for rd in rrset)

    rcode = dns.rcode.to_text(msg.rcode()) + ("+TC" if msg.flags & 0x0200 else "")
    return (rcode, lines(msg.answer), frozenset(x for x in lines(msg.additional)))


def dns_type(code: int) -> str:
    import dns.rdatatype

    return dns.rdatatype.to_text(code)


# =========================================================================== writers (the state's source)


class ManifestWriter:
    """Writes the whole state as one JSON manifest, atomically (mcsdns sees old or new, never half)."""

    def __init__(self, directory: Path, model: Model) -> None:
        self.path = directory / "soak.json"
        self.tmp = directory / ".soak.json.tmp"
        self.model = model
        self.api_version = f"{MCS}/v1beta1"

    def write(self, state: dict[str, int], key: str | None) -> None:
        self.tmp.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": self.model.objects(state, self.api_version)}))
        os.replace(self.tmp, self.path)


class ApiWriter:
    """Writes only what changed to a Kubernetes API, with the testbed's small JSON client."""

    def __init__(self, kubeconfig: Path, model: Model) -> None:
        self.api = KubeClient.from_kubeconfig(kubeconfig)
        self.model = model
        self.api_version = self._import_version()

    def _import_version(self) -> str:
        groups = self.api.request("GET", f"/apis/{MCS}")
        versions = [v["version"] for v in groups.get("versions", [])]
        return f"{MCS}/{'v1beta1' if 'v1beta1' in versions else 'v1alpha1'}"

    def write_all(self, state: dict[str, int]) -> None:
        """The initial state: every object applied (and the toggle import created or deleted)."""
        for obj in self.model.objects(state, self.api_version):
            try:
                self.api.apply(obj)
            except ApiError as exc:
                raise RuntimeError(f"cannot write {obj['kind']} {obj['metadata']['name']}: {exc}") from exc
        if not self.model.toggle_present(state["toggle"]):
            self.api.delete(self.api_version, "ServiceImport", NAMESPACE, "toggle")

    def write(self, state: dict[str, int], key: str | None) -> None:
        if key is None:
            self.write_all(state)
            return
        v = state[key]
        if key.startswith("vip"):
            i = int(key[3:])
            self.api.patch(self.api_version, "ServiceImport", NAMESPACE, key, {"spec": {"ips": [self.model.vip_ip(i, v)]}})
        elif key.startswith("hdl"):
            self.api.apply(self.model.slice_obj(int(key[3:]), v))
        elif self.model.toggle_present(v):
            self.api.apply(self.model.import_obj("toggle", ["10.203.0.1"], False, self.api_version))
        else:
            self.api.delete(self.api_version, "ServiceImport", NAMESPACE, "toggle")


def updater(writer_spec: tuple, model: Model, interval: float, start: tuple, state: dict[str, int], queues: list,
            results: Any) -> None:
    """Every `interval`, advance one key (round robin), tell the senders first, then write it. Reports every
    write as (time, key, version): the next phase starts from the state this one left."""
    writer = make_writer(writer_spec, model)
    keys = model.keys()
    write_times: list[float] = []
    log: list[tuple[float, str, int]] = []
    n = 0
    start_at, stop_at = wait_start(start)
    next_at = start_at
    while True:
        now = time.monotonic()
        if now >= stop_at:
            break
        if now < next_at:
            time.sleep(min(next_at - now, 0.01))
            continue
        next_at += interval
        key = keys[n % len(keys)]
        n += 1
        state[key] += 1
        # Senders learn of a version before it can possibly be served: the time is taken before the write.
        t = time.monotonic()
        for q in queues:  # a pipe write completes before send() returns: no feeder thread, no race with the write
            q.send((t, key, state[key]))
        log.append((t, key, state[key]))
        try:
            writer.write(state, key)
        except Exception as exc:  # a failed write: say so, the version may still land
            results.put(("update_error", repr(exc)))
        write_times.append(time.monotonic() - t)
    for q in queues:
        q.send(None)
    results.put(("updates", {"count": n, "write_p50_ms": _ms(write_times, 0.5), "write_max_ms": _ms(write_times, 1.0), "log": log}))


def wait_start(start: tuple) -> tuple[float, float]:
    """(start time, stop time) of a phase, once every one of its processes is set up (and has said so)."""
    barrier, clock, seconds = start
    barrier.wait()  # every process is set up
    barrier.wait()  # the phase's start time is set
    delay = clock.value - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    return clock.value, clock.value + seconds


def make_writer(spec: tuple, model: Model):
    kind, arg = spec
    return ManifestWriter(Path(arg), model) if kind == "manifests" else ApiWriter(Path(arg), model)


def _ms(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 2)


# =========================================================================== senders (the checker)


@dataclass
class SenderStats:
    sent: int = 0
    answered: int = 0
    wrong: int = 0
    lost: int = 0
    late: int = 0  # answered after the loss timeout (counted lost, not wrong)
    truncated: int = 0
    skipped: int = 0  # open loop: queries not sent because the sender was more than MAX_LAG behind its schedule
    cpu_s: float = 0.0  # the sender's own CPU time (user + system), start to end
    max_lag_ms: float = 0.0  # open loop: the furthest the sender fell behind its schedule (not scheduled, busy)
    lag_ms_by_second: list = field(default_factory=list)  # ... and in each second of the phase
    examples: list = field(default_factory=list)
    propagation: list = field(default_factory=list)  # seconds from a write to the first answer showing it


def warm_up() -> None:
    """Parse one reply of each type the mix asks for: dnspython's lazy imports happen before the clock starts."""
    import dns.message
    import dns.rrset

    reply = dns.message.make_response(dns.message.make_query("w.example.", "A"))
    for rdtype, text in (("A", "10.0.0.1"), ("AAAA", "fd00::1"), ("SRV", "0 100 80 w.example."), ("TXT", '"w"')):
        reply.answer.append(dns.rrset.from_text("w.example.", 5, "IN", rdtype, text))
    canonical(reply.to_wire())


def sender(index: int, server: tuple[str, int], model: Model, rate: float | None, window: int, tick: float,
           start: tuple, history: dict[str, list[tuple[float, int]]], updates: Any, results: Any,
           allowed_delay: float, timeout: float) -> None:
    """Open loop at `rate` qps (None: closed loop, `window` outstanding per socket).

    Open loop, the sender wakes every `tick` seconds (sooner only to catch up), sends what is due by then
    and reads every reply waiting: the server sees a batch of rate x tick queries per sender per tick
    however fast it answers, and the checker is not woken by each reply. `history` holds, per key, the
    versions written so far as (time written, version), oldest first."""
    mix = model.queries()
    nq = len(mix)
    packets = [bytearray(query_wire(name, qtype)) for _, name, qtype in mix]  # the ID is written in place
    socks = []
    for _ in range(SOCKETS_PER_SENDER):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.connect(server)
        s.setblocking(False)
        socks.append(s)
    nsock = len(socks)
    fd_index = {s.fileno(): k for k, s in enumerate(socks)}
    updates_fd = updates.fileno() if updates is not None else -1
    fds = list(fd_index) + ([updates_fd] if updates is not None else [])
    rng = random.Random(index)
    ids = [rng.randrange(65536) for _ in socks]
    # (ID << 2 | socket) -> (query, sent at). Insertion order is send order (a reused key is deleted first),
    # so the loss sweep looks only at the oldest entries.
    outstanding: dict[int, tuple[int, float]] = {}
    timeline: dict[str, list[tuple[float, int]]] = {k: list(v) for k, v in history.items()}
    seen_version: dict[str, int] = {k: len(v) - 1 for k, v in timeline.items()}
    verify: deque = deque()
    caches: list[dict[bytes, tuple]] = [{} for _ in mix]  # per query: reply without its ID -> canonical form
    cached = 0
    expected_cache: dict[tuple[int, int], tuple] = {}
    stats = SenderStats()
    updates_open = updates is not None
    qi = index
    monotonic, select_ = time.monotonic, select.select
    warm_up()
    start_at, stop_at = wait_start(start)
    cpu0 = time.process_time()
    last_sweep = next_tick = last_tick = start_at
    ticks = index
    lags = [0.0] * (int(stop_at - start_at) + 1)

    def send(now: float, k: int) -> None:
        nonlocal qi
        i = ids[k] = (ids[k] + 1) & 0xFFFF
        key = i << 2 | k
        q = qi % nq
        qi += 1
        stats.sent += 1
        packet = packets[q]
        packet[0] = i >> 8
        packet[1] = i & 0xFF
        try:
            socks[k].send(packet)
        except (BlockingIOError, ConnectionRefusedError):
            stats.lost += 1
            return
        if outstanding.pop(key, None) is not None:  # the ID space of this socket wrapped within the timeout: lost
            stats.lost += 1
        outstanding[key] = (q, now)

    while True:
        now = monotonic()
        sending = now < stop_at
        if not sending and ((not outstanding and not verify) or now >= stop_at + timeout + allowed_delay + 1):
            break
        # 1. send what is due, then wait: open loop until the next tick, closed loop until a reply comes
        if sending:
            if rate is not None:
                if now >= next_tick:
                    # One socket per tick: the replies to a tick's batch wait on one socket, one recv() finds it empty.
                    k = ticks % nsock
                    ticks += 1
                    scheduled = stats.sent + stats.skipped
                    lag = now - start_at - scheduled / rate  # how late the oldest query due is
                    second = min(int(now - start_at), len(lags) - 1)
                    if lag > lags[second]:
                        lags[second] = lag
                    # A sender that fell behind (not scheduled for a while) does not send what it missed in one
                    # burst the server's socket could not hold (the checker's hiccup is not the server's loss):
                    # it skips what is over MAX_LAG late and catches up on the rest at twice the rate.
                    if lag > MAX_LAG:
                        skip = int((lag - MAX_LAG) * rate)
                        stats.skipped += skip
                        scheduled += skip
                    due = int((now - start_at) * rate) - scheduled
                    period, last_tick = min(now - last_tick, 0.002), now
                    for _ in range(min(due, max(2, int(2 * rate * period) + 1))):
                        send(now, k)
                    next_tick = max(now + tick, start_at + (stats.sent + stats.skipped + 1) / rate)
                pause = next_tick - monotonic()
                if pause > 0:
                    time.sleep(pause)
                ready = select_(fds, (), (), 0)[0]
            else:
                for _ in range(min(window * nsock - len(outstanding), 500)):
                    send(now, qi % nsock)
                ready = select_(fds, (), (), 0.005)[0]
        else:
            ready = select_(fds, (), (), 0.02)[0]
        # 2. read replies and learn new versions (the updater tells first, then writes)
        for fd in ready:
            if fd == updates_fd:
                while updates_open:
                    msg = updates.recv()
                    if msg is None:
                        updates_open = False
                        fds.remove(updates_fd)
                        break
                    t, key, v = msg
                    timeline[key].append((t, v))
                    if not select_((updates_fd,), (), (), 0)[0]:
                        break
                continue
            k = fd_index[fd]
            recv = socks[k].recv
            batch = []
            while True:
                try:
                    batch.append(recv(4096))
                except (BlockingIOError, InterruptedError, ConnectionRefusedError):
                    break
            recv_at = monotonic()  # after the reads: never earlier than a reply's arrival
            for data in batch:
                if len(data) < 12:
                    continue
                item = outstanding.pop(((data[0] << 8 | data[1]) << 2) | k, None)
                if item is None:
                    stats.late += 1
                    continue
                q, sent_at = item
                stats.answered += 1
                # Measuring the maximum checks every answer too: the client's cost per answer, and so the
                # CPU left to the server on a small machine, is then the same as during the soak.
                body = data[2:]
                canon = caches[q].get(body)
                if canon is None:
                    try:
                        canon = canonical(data)
                    except Exception as exc:  # noqa: BLE001 -- an unparseable reply is a wrong one
                        canon = ("UNPARSEABLE", repr(exc))
                    if cached < 200_000:
                        caches[q][body] = canon
                        cached += 1
                verify.append((recv_at, q, sent_at, canon))
        # 3. check answers once every version they could show is known
        now = monotonic()
        while verify and (now - verify[0][0] > 0.25 or (not updates_open and now >= stop_at)):
            recv_at, q, sent_at, canon = verify.popleft()
            key, name, qtype = mix[q]
            versions = timeline.get(key) or [(float("-inf"), 0)]
            ok = False
            for j in range(len(versions) - 1, -1, -1):
                t_j, v = versions[j]
                if t_j > recv_at:
                    continue  # written after the reply came back: it cannot be what was served
                replaced = versions[j + 1][0] if j + 1 < len(versions) else float("inf")
                if replaced < sent_at - allowed_delay:
                    break  # this and older versions were replaced too long before the query
                exp = expected_cache.get((q, v))
                if exp is None:
                    exp = expected_cache[(q, v)] = model.expected(key, name, qtype, v)
                if canon == exp:
                    ok = True
                    if key and j > seen_version[key]:
                        seen_version[key] = j
                        if t_j > float("-inf"):
                            stats.propagation.append(recv_at - t_j)
                    break
            if not ok:
                if str(canon[0]).endswith("+TC"):
                    stats.truncated += 1
                stats.wrong += 1
                if len(stats.examples) < 5:
                    stats.examples.append({"query": f"{name} {dns_type(qtype)}", "got": _show(canon),
                                           "acceptable": [_show(model.expected(key, name, qtype, v)) for t, v in versions[-3:]]})
        # 4. queries unanswered for `timeout` are lost (the oldest come first)
        if now - last_sweep > 0.1:
            last_sweep = now
            expired = []
            for key_, (_, sent_at) in outstanding.items():
                if now - sent_at <= timeout:
                    break
                expired.append(key_)
            for key_ in expired:
                del outstanding[key_]
            stats.lost += len(expired)
    stats.cpu_s = round(time.process_time() - cpu0, 3)
    stats.lag_ms_by_second = [round(1000 * lag, 1) for lag in lags]
    stats.max_lag_ms = max(stats.lag_ms_by_second)
    for s in socks:
        s.close()
    results.put(("sender", index, stats.__dict__))


def _show(canon: tuple) -> list:
    return [canon[0], sorted(canon[1]) if isinstance(canon[1], frozenset) else canon[1], sorted(canon[2]) if len(canon) > 2 else []]


# =========================================================================== running mcsdns


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (from /proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def udp_drops(port: int) -> int:
    """Datagrams the kernel dropped on the socket bound to `port` (receive buffer full), from /proc/net/udp."""
    total = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 12 and int(parts[1].rsplit(":", 1)[1], 16) == port:
                total += int(parts[-1])
    return total


def wait_for_state(server: tuple[str, int], model: Model, state: dict[str, int], timeout: float) -> float:
    """Until every key answers its current version (the server has the state the run starts from)."""
    started = time.monotonic()
    mix = model.queries()
    pending = {q for q, (key, _, _) in enumerate(mix)}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.3)
        while pending and time.monotonic() - started < timeout:
            for q in list(pending):
                key, name, qtype = mix[q]
                try:
                    s.sendto(query_wire(name, qtype), server)
                    data = s.recv(65535)
                except OSError:
                    time.sleep(0.1)
                    continue
                if canonical(data) == model.expected(key, name, qtype, state.get(key, 0)):
                    pending.discard(q)
            if pending:
                time.sleep(0.1)
    if pending:
        raise RuntimeError(f"mcsdns did not serve the initial state within {timeout}s: {[mix[q][1] for q in pending]}")
    return time.monotonic() - started


# =========================================================================== soak

LOSS_LIMIT = 0.001  # a search step passes when it loses under 0.1% of its queries (the "maximum")
ACHIEVED = 0.97  # ... and its senders sent at least 97% of the asked rate (as benchmarks/load.py)


class Checker:
    """The server under test and everything the checker has written to its source so far. Phases run one
    after another, each starting from the state the previous one left: the senders get every version
    written so far (a reply may still show one written just before the phase began)."""

    def __init__(self, server: tuple[str, int], pid: int, model: Model, writer_spec: tuple, args: argparse.Namespace) -> None:
        self.server, self.pid, self.model, self.writer_spec, self.args = server, pid, model, writer_spec, args
        self.state = {k: 0 for k in model.keys()}
        self.history: dict[str, list[tuple[float, int]]] = {k: [(float("-inf"), 0)] for k in model.keys()}

    def phase(self, rate: float | None, seconds: float, interval: float) -> dict:
        """Senders at `rate` (None: closed loop), and the updater every `interval` s (0: none); the merged result."""
        args, server, pid = self.args, self.server, self.pid
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        drops_before = udp_drops(server[1])
        barrier, clock = ctx.Barrier(args.senders + (1 if interval else 0) + 1), ctx.RawValue("d", 0.0)
        start = (barrier, clock, seconds)
        # Versions travel on pipes, not queues: the updater's send() has reached the sender's pipe before the
        # write it announces starts, so a sender never sees an answer from a version it has not been told of.
        pipes = [ctx.Pipe(duplex=False) for _ in range(args.senders)] if interval else [(None, None)] * args.senders
        procs = []
        for i in range(args.senders):
            per = None if rate is None else rate / args.senders
            procs.append(ctx.Process(target=sender, args=(i, server, self.model, per, args.window, args.tick, start,
                                                          self.history, pipes[i][0], results, args.allowed_delay, args.timeout),
                                     daemon=True))  # fmt: skip
        if interval:
            procs.append(ctx.Process(target=updater, args=(self.writer_spec, self.model, interval, start, dict(self.state),
                                                           [w for _, w in pipes], results), daemon=True))  # fmt: skip
        for p in procs:
            p.start()
        try:
            barrier.wait(timeout=120)  # every process is up and set up (sockets, imports) before the clock starts
            start_at = time.monotonic() + 0.1
            stop_at = start_at + seconds
            clock.value = start_at
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            for p in procs:
                p.terminate()
            raise RuntimeError("a soak process did not start") from None
        rss: list[tuple[float, int]] = []
        drops: list[int] = []  # the server socket's drops, sampled every second: bursts vs a steady shortfall
        cpu: list[float] = []  # the server's CPU seconds: busy elsewhere (high) or starved (low) when it dropped
        while time.monotonic() < start_at:
            time.sleep(0.05)
        while time.monotonic() < stop_at:
            if pid:
                rss.append((round(time.monotonic() - start_at, 1), rss_kb(pid)))
            drops.append(udp_drops(server[1]))
            cpu.append(cpu_seconds(pid) if pid else 0.0)
            time.sleep(min(1.0, max(0.0, stop_at - time.monotonic())))
        if pid:
            rss.append((round(time.monotonic() - start_at, 1), rss_kb(pid)))
        drops.append(udp_drops(server[1]))
        cpu.append(cpu_seconds(pid) if pid else 0.0)
        merged = SenderStats().__dict__
        merged["propagation"] = []
        updates: dict = {}
        errors: list[str] = []
        want = len(procs)
        deadline = time.monotonic() + args.timeout + args.allowed_delay + 30
        while want and time.monotonic() < deadline:
            try:
                msg = results.get(timeout=1)
            except queue_mod.Empty:
                continue
            if msg[0] == "sender":
                for k, v in msg[2].items():
                    if k == "max_lag_ms":
                        merged[k] = max(merged[k], v)
                    elif k == "lag_ms_by_second":
                        merged[k] = [max(a, b) for a, b in zip(merged[k], v)] if merged[k] else v
                    else:
                        merged[k] = merged[k] + v
                want -= 1
            elif msg[0] == "updates":
                updates = msg[1]
                want -= 1
            else:
                errors.append(msg[1])
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
        if want:
            raise RuntimeError(f"{want} soak process(es) did not report")
        for t, key, v in updates.pop("log", []):
            self.history[key].append((t, v))
            self.state[key] = v
        merged["cpu_s"] = round(merged["cpu_s"], 2)
        merged["seconds"] = seconds
        merged["rss_kb"] = rss
        merged["server_socket_drops"] = udp_drops(server[1]) - drops_before
        per_second = [b - a for a, b in zip(drops, drops[1:])]
        merged["drop_seconds"] = sum(1 for d in per_second if d)  # seconds in which the server's socket dropped any
        merged["worst_drop_second"] = max(per_second, default=0)
        cpu_per_second = [round(100 * (b - a)) for a, b in zip(cpu, cpu[1:])]
        worst = sorted(range(len(per_second)), key=lambda i: -per_second[i])[:8]
        lags = merged.pop("lag_ms_by_second") or [0.0]
        # (second, datagrams dropped, server CPU % in that second, senders' worst lag in ms), the worst seconds first:
        # a server starved of CPU (low), busy (high), or a burst after the checker itself stalled (a long lag)
        merged["drop_detail"] = [(i, per_second[i], cpu_per_second[i], lags[min(i, len(lags) - 1)]) for i in worst if per_second[i]]
        merged["server_cpu_pct_median"] = sorted(cpu_per_second)[len(cpu_per_second) // 2] if cpu_per_second else None
        sent_k = max(1, merged["sent"]) / 1000
        # CPU per 1 000 queries sent: the checker's (its senders') and the server's (during the sending seconds)
        merged["checker_cpu_ms_per_1k"] = round(1000 * merged["cpu_s"] / sent_k, 2)
        merged["server_cpu_ms_per_1k"] = round(1000 * (cpu[-1] - cpu[0]) / sent_k, 2) if pid else None
        merged["updates"] = updates
        merged["update_errors"] = errors[:5]
        return merged


def step_verdict(rate: float, result: dict) -> str:
    """"pass", "fail" (the server lost 0.1% or more), or "checker behind": nothing lost but the senders,
    not scheduled for a while, skipped so much that under 97% of the rate was sent."""
    sent = result["sent"]
    if not sent or result["lost"] / sent >= LOSS_LIMIT:
        return "fail"
    if sent / result["seconds"] >= ACHIEVED * rate:
        return "pass"
    return "checker behind" if (sent + result["skipped"]) / result["seconds"] >= ACHIEVED * rate else "fail"


def search_max(checker: Checker, start: float, steps: int, seconds: float, resolution: float) -> dict:
    """The maximum sustained rate: open-loop steps under the soak's conditions (same senders, every answer
    checked, the updater running), bisecting between the best passing rate and the lowest failing one, as
    benchmarks/load.py does; up x1.25 until a step fails, down x0.6 until one passes, at most `steps`."""
    out: dict[str, Any] = {"start_qps": round(start), "step_seconds": seconds, "steps": [], "wrong": 0, "examples": []}
    best: tuple[float, dict] | None = None
    low_fail: float | None = None
    rate = start
    started = time.monotonic()
    retried = False
    for _ in range(steps):
        result = checker.phase(rate, seconds, checker.args.update_interval)
        verdict = step_verdict(rate, result)
        passed = verdict == "pass"
        out["steps"].append({
            "rate": round(rate), "sent_qps": round(result["sent"] / seconds), "skipped": result["skipped"],
            "answered_qps": round(result["answered"] / seconds),
            "lost": result["lost"], "lost_pct": round(100 * result["lost"] / max(1, result["sent"]), 4), "late": result["late"],
            "server_socket_drops": result["server_socket_drops"], "drop_detail": result["drop_detail"][:3], "wrong": result["wrong"],
            "checker_cpu_ms_per_1k": result["checker_cpu_ms_per_1k"], "server_cpu_ms_per_1k": result["server_cpu_ms_per_1k"],
            "server_cpu_pct_median": result["server_cpu_pct_median"], "sender_max_lag_ms": result["max_lag_ms"],
            "passed": passed, "verdict": verdict})  # fmt: skip
        out["wrong"] += result["wrong"]
        out["examples"] += result["examples"][: 5 - len(out["examples"])]
        if verdict == "checker behind" and not retried:  # says nothing of the server: the same rate once more
            retried = True
            continue
        retried = False
        if passed:
            if best is None or result["answered"] > best[1]["answered"]:
                best = (rate, result)
            rate = (rate + low_fail) / 2 if low_fail else rate * 1.25
        else:
            low_fail = rate if low_fail is None else min(low_fail, rate)
            rate = (best[0] + low_fail) / 2 if best is not None else rate * 0.6
        if best is not None and low_fail is not None and low_fail - best[0] <= resolution * best[0]:
            break
    out["seconds"] = round(time.monotonic() - started, 1)
    out["max_qps"] = round(best[1]["answered"] / seconds) if best else None  # answered per second in the best step
    out["lowest_failed_qps"] = round(low_fail) if low_fail else None
    return out


def soak(args: argparse.Namespace) -> dict:
    model = Model(args.vips, args.headless, args.endpoints)
    state = {k: 0 for k in model.keys()}
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-soak-"))
    testbed = None
    mcsdns: McsdnsServer | None = None
    try:
        if args.testbed:
            testbed = Testbed()
            testbed.start()
            testbed.install_crd("v0.5.0")
            args.kubeconfig = str(testbed.kubeconfig_path)
        if args.kubeconfig:
            writer_spec = ("api", args.kubeconfig)
            source_args = ["--kubeconfig", args.kubeconfig]
        else:
            directory = Path(args.manifests) if args.manifests else tmp / "manifests"
            directory.mkdir(parents=True, exist_ok=True)
            writer_spec = ("manifests", str(directory))
            source_args = ["--manifests", str(directory)]
        make_writer(writer_spec, model).write(state, None)
        if args.server:
            host, _, port = args.server.rpartition(":")
            server, pid = (host, int(port)), args.pid or 0
        else:
            mcsdns = McsdnsServer(*source_args, "--log-level", "WARNING", *(args.mcsdns_arg or []), wait_ready=False)
            mcsdns.start(tmp / "mcsdns.log", timeout=60)
            server, pid = mcsdns.addr, mcsdns.proc.pid
        settle = wait_for_state(server, model, state, timeout=60)
        checker = Checker(server, pid, model, writer_spec, args)
        report: dict[str, Any] = {"mode": writer_spec[0], "server": f"{server[0]}:{server[1]}", "initial_sync_s": round(settle, 2)}
        maximum = None
        if args.rate:
            rate = args.rate
            report["max_method"] = "fixed rate"
        else:
            probe = checker.phase(None, args.measure_seconds, 0)
            closed = probe["answered"] / args.measure_seconds
            report["closed_loop"] = {
                "qps": round(closed), "seconds": args.measure_seconds, "in_flight": f"{args.senders} x {SOCKETS_PER_SENDER} x {args.window}",
                "lost": probe["lost"], "wrong": probe["wrong"], "server_socket_drops": probe["server_socket_drops"],
                "checker_cpu_ms_per_1k": probe["checker_cpu_ms_per_1k"], "server_cpu_ms_per_1k": probe["server_cpu_ms_per_1k"],
                "examples": probe["examples"]}  # fmt: skip
            if args.search_steps:
                search = search_max(checker, max(100.0, closed * args.search_start), args.search_steps, args.step_seconds, args.search_resolution)
                report["search"] = search
                maximum = search["max_qps"]
                report["max_method"] = "open-loop search"
                # No step passed: the maximum is below the lowest rate tried; soak at the fraction of that.
                basis = maximum or min(st["rate"] for st in search["steps"])
            else:
                maximum = basis = closed
                report["max_method"] = "closed-loop probe"
            rate = basis * args.rate_fraction
            if args.max_rate:
                rate = min(rate, args.max_rate)
        report["max_qps"] = round(maximum) if maximum else None
        report["rate_qps"] = round(rate)
        result = checker.phase(rate, args.duration, args.update_interval)
        prop = sorted(result.pop("propagation"))
        rss = result.pop("rss_kb")
        report.update(result)
        report["achieved_qps"] = round(result["sent"] / args.duration)
        report["lost_pct"] = round(100 * result["lost"] / max(1, result["sent"]), 4)
        report["propagation_s"] = {"n": len(prop), "p50": _q(prop, 0.5), "p99": _q(prop, 0.99), "max": _q(prop, 1.0)}
        if rss:
            values = [kb for _, kb in rss]
            report["rss_mb"] = {"start": round(rss[0][1] / 1024, 1), "end": round(rss[-1][1] / 1024, 1),
                                "min": round(min(values) / 1024, 1), "max": round(max(values) / 1024, 1),
                                "second_half_growth": round((rss[-1][1] - rss[len(rss) // 2][1]) / 1024, 1)}  # fmt: skip
        if mcsdns is not None:
            report["server_alive"] = mcsdns.proc.poll() is None
            report["server_tracebacks"] = mcsdns.log().count("Traceback")
        return report
    finally:
        if mcsdns is not None:
            mcsdns.stop(10)
        if testbed is not None:
            testbed.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # the manifests and the server's log (every run left one behind)


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def print_report(report: dict) -> None:
    print(f"mode {report['mode']}, server {report['server']}")
    closed = report.get("closed_loop")
    if closed:
        print(f"closed-loop probe: {closed['qps']} qps answered ({closed['in_flight']} in flight, {closed['seconds']} s), "
              f"lost {closed['lost']}, wrong {closed['wrong']}")
    search = report.get("search")
    if search:
        print(f"open-loop search from {search['start_qps']} qps, {search['step_seconds']} s steps with the updates running "
              f"(pass: under {100 * LOSS_LIMIT:g}% lost, at least {100 * ACHIEVED:g}% of the rate sent; a step whose senders "
              f"fell behind is run again once), {search['seconds']} s:")
        for st in search["steps"]:
            worst = ", worst seconds (s, drops, server CPU %, sender lag ms) " + " ".join(map(str, st["drop_detail"])) if st["drop_detail"] else ""
            skipped = f" ({st['skipped']} skipped)" if st["skipped"] else ""
            print(f"  {st['rate']:>7} qps: sent {st['sent_qps']}/s{skipped}, lost {st['lost']} ({st['lost_pct']}%, socket drops "
                  f"{st['server_socket_drops']}{worst}), wrong {st['wrong']}, CPU per 1k queries: checker "
                  f"{st['checker_cpu_ms_per_1k']} ms, server {st['server_cpu_ms_per_1k']} ms; senders at most "
                  f"{st['sender_max_lag_ms']} ms late -> {st['verdict'].upper() if st['verdict'] != 'pass' else 'pass'}")
        if search["max_qps"] is None:
            print(f"  no step passed: the maximum is below {min(st['rate'] for st in search['steps'])} qps")
        elif search["lowest_failed_qps"] is None:
            print(f"  no step failed within --search-steps: the maximum is at least {search['max_qps']} qps")
    print(f"max {report['max_qps']} qps ({report['max_method']}); soak at {report['rate_qps']} qps for {report['seconds']} s "
          f"({report['achieved_qps']} qps achieved)")
    if report["skipped"]:
        print(f"queries skipped {report['skipped']} (not sent: the senders were over {MAX_LAG * 1000:g} ms behind schedule)")
    print(f"queries sent {report['sent']}, answered {report['answered']}, wrong {report['wrong']}, lost {report['lost']} "
          f"({report['lost_pct']}%), late {report['late']}; the server's socket dropped {report['server_socket_drops']} "
          f"(in {report['drop_seconds']} of {int(report['seconds'])} seconds, at most {report['worst_drop_second']} in one)")
    if report["drop_detail"]:
        print("  worst seconds (s, drops, server CPU %, sender lag ms):", " ".join(map(str, report["drop_detail"])))
    print(f"updates {report['updates'].get('count')} (write p50 {report['updates'].get('write_p50_ms')} ms); "
          f"propagation seen p50 {report['propagation_s']['p50']} s, p99 {report['propagation_s']['p99']} s, max {report['propagation_s']['max']} s")
    print(f"CPU per 1 000 queries: checker {report['checker_cpu_ms_per_1k']} ms, server {report['server_cpu_ms_per_1k']} ms "
          f"(server median {report['server_cpu_pct_median']}% of a core); senders at most {report['max_lag_ms']} ms behind schedule")
    if "rss_mb" in report:
        r = report["rss_mb"]
        print(f"server RSS start {r['start']} MB, end {r['end']} MB (min {r['min']}, max {r['max']}, second-half growth {r['second_half_growth']} MB)")
    for example in report.get("examples", []) + (search or {}).get("examples", []) + (closed or {}).get("examples", []):
        print("WRONG:", json.dumps(example))
    print(json.dumps(report))


# =========================================================================== flood


def flood_packets(rng: random.Random, count: int) -> list[bytes]:
    """A mix: valid queries for real names, random names and types (the lazy-answer paths), garbage."""
    names = [f"vip{i}.{NAMESPACE}.svc.{ZONE}." for i in range(4)] + [
        "svc1.testns.svc.clusterset.local.", "hdls1.testns.svc.clusterset.local.", "many.testns.svc.clusterset.local.",
        "_http._tcp.svc1.testns.svc.clusterset.local.", "clusterset.local."]  # fmt: skip
    out = []
    for n in range(count):
        kind = n % 10
        if kind < 5:
            out.append(query_wire(rng.choice(names), rng.choice((A, AAAA, SRV, TXT))))
        elif kind < 7:  # random existing-looking names and random types: exercises per-query answers
            name = f"x{rng.randrange(10**9)}.c{rng.randrange(100)}.{rng.choice(names)}"
            out.append(query_wire(name, rng.randrange(1, 65536)))
        elif kind < 8:
            out.append(query_wire(rng.choice(names), rng.randrange(1, 65536)))
        else:  # garbage: headers that lie, noise
            junk = bytearray(rng.randbytes(rng.randrange(0, 200)))
            if len(junk) >= 12 and rng.random() < 0.5:
                junk[2] &= 0x7F  # looks like a query
            out.append(bytes(junk))
    return out


def flood_worker(index: int, server: tuple[str, int], seconds: float, max_packets: int, rate: float,
                 cpu: int | None, results: Any) -> None:
    """Send the mix for `seconds`: unpaced if `rate` is 0, else `rate` packets/s, in bursts of 256."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rng = random.Random(1000 + index)
    packets = flood_packets(rng, 4096)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    s.connect(server)  # a connected socket: send() skips the address lookup of sendto()
    send = s.send
    # sendmmsg where there is one: a flooder sending one datagram per call no longer reaches 5x what a
    # batching server answers (tests/test_overload.py), so each burst of 256 is one call.
    burst = mmsg.Burst(packets) if mmsg.available() else None
    sent = dropped = 0
    started = time.monotonic()
    end = started + seconds
    i = 0
    while sent + dropped < max_packets and (now := time.monotonic()) < end:
        if rate:
            due = started + (sent + dropped) / rate  # the schedule: never ahead of it, never a burst to catch up
            if due > now:
                time.sleep(min(due - now, end - now))
                continue
        if burst is not None:
            left = 256
            while left:
                try:
                    n = burst.send(s.fileno(), i & 4095, left)
                except OSError:  # as below, for the first packet of the rest
                    n = 0
                    dropped += 1
                    i += 1
                    left -= 1
                sent += n
                i += n
                left -= n
            continue
        for _ in range(256):
            try:
                send(packets[i & 4095])
                sent += 1
            except OSError:  # a full send buffer, or a refusal reported by an earlier ICMP
                dropped += 1
            i += 1
    results.put((sent, dropped, time.monotonic() - started))


def flood(server: tuple[str, int], seconds: float, processes: int, max_packets: int, rate: float = 0.0,
          cpu: int | None = None) -> dict:
    """`processes` senders for at most `seconds` and `max_packets` each; returns what was sent.

    `rate` (packets/s, all processes together; 0: as fast as they can) paces them;
    `cpu` pins them to that CPU, so a test can keep them off the server's core.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=flood_worker, args=(i, server, seconds, max_packets, rate / processes, cpu, results), daemon=True)
             for i in range(processes)]  # fmt: skip
    for p in procs:
        p.start()
    sent = dropped = 0
    longest = 0.0
    for _ in procs:
        s, d, t = results.get(timeout=seconds + 30)
        sent, dropped, longest = sent + s, dropped + d, max(longest, t)
    for p in procs:
        p.join(5)
    return {"sent": sent, "send_errors": dropped, "seconds": round(longest, 2), "pps": round(sent / max(longest, 1e-9)),
            "target_pps": round(rate) or None}


# =========================================================================== command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("soak", help="steady queries while the state changes; every answer checked")
    s.add_argument("--duration", type=float, default=300.0, help="seconds of soak (default 300)")
    s.add_argument("--rate", type=float, default=0.0,
                   help="queries per second, no maximum measured (default: --rate-fraction of the measured maximum)")
    s.add_argument("--rate-fraction", type=float, default=0.7, help="fraction of the measured maximum to send (default 0.7)")
    s.add_argument("--max-rate", type=float, default=0.0, help="cap on the rate computed from the maximum (0: none)")
    s.add_argument("--measure-seconds", type=float, default=5.0, help="length of the closed-loop probe (default 5)")
    s.add_argument("--window", type=int, default=64, help="outstanding queries per socket in the closed-loop probe (default 64)")
    s.add_argument("--search-steps", type=int, default=8,
                   help="at most this many open-loop rate steps to find the maximum (default 8; 0: the closed-loop probe is the maximum)")
    s.add_argument("--step-seconds", type=float, default=8.0, help="length of each open-loop step (default 8)")
    s.add_argument("--search-start", type=float, default=0.5, help="first step's rate, as a fraction of the closed-loop probe's (default 0.5)")
    s.add_argument("--search-resolution", type=float, default=0.05,
                   help="stop when the lowest failing rate is within this fraction of the best passing one (default 0.05)")
    s.add_argument("--tick", type=float, default=0.00025,
                   help="open loop: each sender sends what is due, and reads replies, every this many seconds (default 0.00025)")
    s.add_argument("--senders", type=int, default=2, help="sender processes")
    s.add_argument("--update-interval", type=float, default=0.1, help="seconds between state changes (default 0.1)")
    s.add_argument("--allowed-delay", type=float, default=0.0,
                   help="propagation allowance in seconds (default: 3 for manifests, which mcsdns polls each second; 1 for the API)")
    s.add_argument("--timeout", type=float, default=2.0, help="a query unanswered this long is lost")
    s.add_argument("--vips", type=int, default=4)
    s.add_argument("--headless", type=int, default=4)
    s.add_argument("--endpoints", type=int, default=4, help="at most this many endpoints per headless service")
    s.add_argument("--manifests", help="directory mcsdns reads (default: a temporary one)")
    s.add_argument("--kubeconfig", help="drive a Kubernetes API instead of manifests")
    s.add_argument("--testbed", action="store_true", help="start the repository's etcd + kube-apiserver and drive it")
    s.add_argument("--server", help="HOST:PORT of an mcsdns already reading the same source (default: start one)")
    s.add_argument("--pid", type=int, help="its PID, for RSS")
    s.add_argument("--mcsdns-arg", action="append", help="extra flag for the mcsdns the checker starts (repeatable)")
    s.add_argument("--json", help="also write the report here")
    s.add_argument("--save", nargs="?", const="", metavar="PATH",
                   help="store the result with its date, commit, machine and command (default path: "
                        "benchmarks/results/soak-manifests.json, or soak-api.json with --kubeconfig/--testbed)")
    f = sub.add_parser("flood", help="UDP flood, bounded in time and count")
    f.add_argument("server", help="HOST:PORT")
    f.add_argument("--seconds", type=float, default=3.0)
    f.add_argument("--processes", type=int, default=2)
    f.add_argument("--max-packets", type=int, default=2_000_000, help="per process")
    f.add_argument("--rate", type=float, default=0.0, help="packets per second, all processes together (default: unpaced)")
    f.add_argument("--cpu", type=int, help="pin the senders to this CPU")
    args = parser.parse_args(argv)
    if args.command == "flood":
        host, _, port = args.server.rpartition(":")
        print(json.dumps(flood((host, int(port)), args.seconds, args.processes, args.max_packets, args.rate, args.cpu)))
        return 0
    if not args.allowed_delay:
        args.allowed_delay = 1.0 if (args.kubeconfig or args.testbed) else 3.0
    started = {"date": provenance.now(), "commit": provenance.commit(), "machine": provenance.machine()}
    report = soak(args)
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if args.save is not None:
        path = Path(args.save) if args.save else RESULTS / f"soak-{'api' if report['mode'] == 'api' else 'manifests'}.json"
        command = "python -m benchmarks.soak " + " ".join(argv if argv is not None else sys.argv[1:])
        path.write_text(json.dumps({**started, "command": command, "report": report}, indent=2) + "\n")
        print(f"stored in {path}")
    wrong = report["wrong"] + report.get("search", {}).get("wrong", 0) + report.get("closed_loop", {}).get("wrong", 0)
    ok = wrong == 0 and report["lost_pct"] < 100 * LOSS_LIMIT
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
