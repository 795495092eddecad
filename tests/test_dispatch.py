"""selector.py's loop: UDP readers called from the selector, everything else as asyncio does it.

In process, on real loopback sockets: the same listener on asyncio's stock loop and on
`selector.new_loop()` sends byte for byte the same replies; on the dispatch loop the reader is
the selector's (no asyncio handle), stops when the listener stops accepting, moves to the plain
path in place, and a reader that raises is reported to the loop's exception handler while the
loop and the other descriptors go on. The command line's servers (every subprocess test) run on it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import selectors
import socket
import time

import dns.message
import pytest

from mcsdns.serve import mmsg, selector
from mcsdns.serve.resolve import Resolver
from mcsdns.serve.transport import DnsServer
from testsupport.inprocess import build_table
from testsupport.mcsdnsserver import ROOT

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
NAMES = ("web.demo.svc.clusterset.local.", "WEB.demo.svc.clusterset.local.", "nothere.demo.svc.clusterset.local.",
         "db.demo.svc.clusterset.local.")

pytestmark = pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="selector.py's selector is epoll's")


def _queries() -> list[bytes]:
    out = []
    for name in NAMES:
        for qtype in ("A", "AAAA", "SRV"):
            q = dns.message.make_query(name, qtype)
            q.id = len(out)
            out.append(q.to_wire())
    return out


async def _exchange(server: DnsServer, addr: tuple[str, int], queries: list[bytes], one_by_one: bool) -> dict[int, bytes]:
    """Every query sent (one at a time, each after the last reply, or all at once); the replies by ID."""
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.setblocking(False)
    got: dict[int, bytes] = {}
    try:
        pending = list(queries) if one_by_one else []
        if not one_by_one:
            for wire in queries:
                client.sendto(wire, addr)
        else:
            client.sendto(pending.pop(0), addr)
        deadline = time.monotonic() + 10
        while len(got) < len(queries) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            while True:
                try:
                    wire = client.recv(65535)
                except BlockingIOError:
                    break
                got[(wire[0] << 8) | wire[1]] = wire
                if pending:
                    client.sendto(pending.pop(0), addr)
    finally:
        client.close()
    return got


def _run(coro_fn, on_dispatch: bool):
    if not on_dispatch:
        return asyncio.run(coro_fn())
    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        return runner.run(coro_fn())


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "plain"])
def test_the_dispatch_loop_answers_as_asyncio_s_own(batched: bool) -> None:
    """One query per wakeup and a burst, on both loops: the same replies, every query answered;
    on the dispatch loop the listener's descriptor is the selector's direct reader, not the loop's."""
    table = build_table([EXAMPLE])
    queries = _queries()

    async def serve() -> tuple[dict[int, bytes], dict[int, bytes], bool]:
        server = DnsServer(Resolver(table), batch_udp=batched)
        addr = await server.listen("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        fd = server._udp[0].fileno()
        current = getattr(loop, "_selector", None)
        direct = isinstance(current, selector.DispatchSelector) and fd in current.direct
        try:
            alone = await _exchange(server, addr, queries, one_by_one=True)
            burst = await _exchange(server, addr, queries, one_by_one=False)
        finally:
            server.stop_accepting()
            if isinstance(current, selector.DispatchSelector):
                assert fd not in current.direct and fd not in current.get_map()
            await server.drain(0)
        return alone, burst, direct

    stock_alone, stock_burst, stock_direct = _run(serve, on_dispatch=False)
    alone, burst, direct = _run(serve, on_dispatch=True)
    assert not stock_direct and direct
    assert len(stock_alone) == len(queries)
    assert alone == stock_alone and burst == stock_burst == stock_alone


@pytest.mark.parametrize("error", [ConnectionRefusedError(errno.ECONNREFUSED, "refused"), InterruptedError(errno.EINTR, "interrupted")],
                         ids=["icmp-error", "eintr"])
def test_a_failed_batch_receive_loses_no_datagram(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    """recvmmsg raising on a wakeup (an ICMP error surfacing on the socket, EINTR) loses no query and
    is not a reader's failure: an error is skipped and the receive tried again at once, EINTR ends the
    wakeup and the next one reads the datagrams; nothing reaches the loop's exception handler. The
    replies are the ones a receive without the error gets."""
    table = build_table([EXAMPLE])
    queries = _queries()
    real = mmsg.Batch.recv
    state = {"fail": 0, "failed": 0}

    def flaky(self: mmsg.Batch, fd: int) -> int:
        if state["fail"]:
            state["fail"] -= 1
            state["failed"] += 1
            raise error
        return real(self, fd)

    monkeypatch.setattr(mmsg.Batch, "recv", flaky)

    reported: list[dict] = []

    async def serve() -> tuple[dict[int, bytes], dict[int, bytes]]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context))
        server = DnsServer(Resolver(table), batch_udp=True)
        addr = await server.listen("127.0.0.1", 0)
        try:
            clean = await _exchange(server, addr, queries, one_by_one=False)
            state["fail"] = 3  # the next three receives raise: every query's wakeup meets one
            failing = await _exchange(server, addr, queries, one_by_one=True)
        finally:
            server.stop_accepting()
            await server.drain(0)
        return clean, failing

    clean, failing = _run(serve, on_dispatch=True)
    assert state["failed"] == 3 and len(clean) == len(queries)
    assert failing == clean
    assert reported == []


def test_a_reader_that_raises_is_reported_and_the_loop_goes_on() -> None:
    """A direct reader's exception reaches the loop's exception handler (as a Handle's does); the
    loop keeps running its other readers and timers, and the reader is called again next time."""
    async def scenario() -> tuple[list[dict], int, bool]:
        loop = asyncio.get_running_loop()
        reported: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (a, c):
            s.setblocking(False)
        calls = {"n": 0}
        other = loop.create_future()

        def bad() -> None:
            a.recv(16)
            calls["n"] += 1
            raise ValueError("boom")

        selector.add_reader(loop, a.fileno(), bad)
        loop.add_reader(c.fileno(), lambda: other.done() or other.set_result(c.recv(16)))  # the loop's own
        try:
            b.send(b"1")
            d.send(b"x")
            assert await asyncio.wait_for(other, 5) == b"x"
            b.send(b"2")
            deadline = time.monotonic() + 5
            while calls["n"] < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            removed = selector.remove_reader(loop, a.fileno())
        finally:
            loop.remove_reader(c.fileno())
            for s in (a, b, c, d):
                s.close()
        return reported, calls["n"], removed

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        reported, calls, removed = runner.run(scenario())
    assert calls == 2 and removed
    assert len(reported) == 2 and all(isinstance(r["exception"], ValueError) for r in reported)


def test_a_reader_replaced_in_place_is_the_new_one() -> None:
    """add_reader on a descriptor that has one replaces it (as the loop's own does): the socket
    that falls back to the plain path is read by the plain reader only."""
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        seen: list[str] = []
        done = loop.create_future()
        selector.add_reader(loop, a.fileno(), lambda: seen.append("first"))
        selector.add_reader(loop, a.fileno(), lambda: (seen.append("second:" + a.recv(8).decode()), done.set_result(None)))
        try:
            b.send(b"q")
            await asyncio.wait_for(done, 5)
        finally:
            selector.remove_reader(loop, a.fileno())
            a.close()
            b.close()
        return seen

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        assert runner.run(scenario()) == ["second:q"]


def test_a_busy_reader_keeps_the_loop_s_timers_and_callbacks_on_time() -> None:
    """While datagrams keep a direct reader busy, the selector serves them without returning to the loop
    (far fewer `select` returns than reader calls), yet the loop's timers fire on time and a callback the
    reader schedules runs at once: `select` returns when the loop has something due."""
    import threading

    async def scenario() -> tuple[int, int, list[float], list[float]]:
        loop = asyncio.get_running_loop()
        sel = loop._selector  # type: ignore[attr-defined]
        returns = {"n": 0}
        plain_select = sel.select

        def counted(timeout: float | None = None) -> list:
            returns["n"] += 1
            return plain_select(timeout)

        sel.select = counted
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        reads = {"n": 0}
        callback_delays: list[float] = []

        def reader() -> None:
            while True:
                try:
                    a.recv(16)
                except BlockingIOError:
                    return
                reads["n"] += 1
                if reads["n"] % 50 == 0:
                    scheduled = time.monotonic()
                    loop.call_soon(lambda: callback_delays.append(time.monotonic() - scheduled))

        stop = threading.Event()

        def send() -> None:
            while not stop.is_set():
                b.send(b"q")
                time.sleep(0.001)

        selector.add_reader(loop, a.fileno(), reader)
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        lateness: list[float] = []
        try:
            for _ in range(10):
                due = time.monotonic() + 0.05
                await asyncio.sleep(0.05)
                lateness.append(time.monotonic() - due)
        finally:
            stop.set()
            sender.join()
            selector.remove_reader(loop, a.fileno())
            sel.select = plain_select
            a.close()
            b.close()
        return reads["n"], returns["n"], lateness, callback_delays

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        reads, returns, lateness, delays = runner.run(scenario())
    assert reads >= 200, reads  # about one datagram per millisecond for half a second
    assert returns < reads / 2, (returns, reads)  # the selector stayed in its own loop between datagrams
    assert max(lateness) < 0.03, lateness  # every timer on time (epoll's millisecond, plus scheduling)
    assert len(delays) >= 4 and max(delays) < 0.01, delays  # the reader's callbacks ran at once


def test_serve_waiting_answers_the_queued_datagrams_from_inside_a_long_callback() -> None:
    """`selector.serve_waiting` from a callback that holds the loop (a compile's step): the queries
    that arrived meanwhile are answered before the callback returns, each with the reply the loop
    gives it otherwise. On asyncio's stock loop it does nothing (they wait for the loop), and from
    inside a direct reader it calls no reader (that reader's buffers are in use)."""
    table = build_table([EXAMPLE])
    queries = _queries()

    async def scenario() -> tuple[dict[int, bytes], dict[int, bytes], list[str]]:
        loop = asyncio.get_running_loop()
        server = DnsServer(Resolver(table))
        addr = await server.listen("127.0.0.1", 0)
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setblocking(False)
        inside: dict[int, bytes] = {}
        done = loop.create_future()

        def long_work() -> None:
            for wire in queries:
                client.sendto(wire, addr)
            time.sleep(0.05)  # the loop is held: the datagrams wait in the listener's buffer
            selector.serve_waiting(loop)
            time.sleep(0.05)
            while True:
                try:
                    wire = client.recv(65535)
                except BlockingIOError:
                    break
                inside[(wire[0] << 8) | wire[1]] = wire
            done.set_result(None)

        order: list[str] = []
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (a, c):
            s.setblocking(False)

        def outer() -> None:  # a direct reader that asks for the waiting ones itself
            a.recv(16)
            order.append("outer")
            selector.serve_waiting(loop)
            order.append("outer done")

        def other() -> None:
            c.recv(16)
            order.append("other")

        try:
            loop.call_soon(long_work)
            await done
            later = await _exchange(server, addr, queries, one_by_one=False)
            selector.add_reader(loop, a.fileno(), outer)
            selector.add_reader(loop, c.fileno(), other)
            d.send(b"x")
            b.send(b"x")
            deadline = time.monotonic() + 5
            while len(order) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            for s in (a, c):
                selector.remove_reader(loop, s.fileno())
            for s in (a, b, c, d, client):
                s.close()
            server.stop_accepting()
            await server.drain(0)
        return inside, later, order

    inside, later, order = _run(scenario, on_dispatch=True)
    assert len(later) == len(queries)
    assert inside == later  # every one answered inside the callback, as the loop answers it
    assert "other" in order and order.index("outer done") == order.index("outer") + 1, order
    stock_inside, stock_later, _ = _run(scenario, on_dispatch=False)
    assert not stock_inside and len(stock_later) == len(queries)


class _Recording:
    """The selector's epoll object, recording the timeout of every wait (a wrapper: epoll's methods
    are read-only)."""

    def __init__(self, poll: object) -> None:
        self._poll = poll
        self.waits: list[float] = []

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list:
        self.waits.append(timeout)
        return self._poll.poll(timeout, maxevents)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._poll, name)


@pytest.mark.parametrize("timerfd", [True, False], ids=["timerfd", "epoll-timeout"])
def test_timers_fire_on_time_while_the_selector_waits_for_datagrams(timerfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a direct reader registered and timers pending, every timer fires on time and in order:
    timers added from a callback, from the reader, from another thread, one cancelled and one
    re-scheduled, deadlines 50 microseconds apart, and one whose expiry `serve_waiting` saw while
    the loop's own reader held the loop. Where there is a timerfd the waits between datagrams carry no
    timeout (the deadline is in the epoll set); without one (its fallback) each wait has the timeout."""
    import threading

    if not timerfd:
        monkeypatch.setattr(selector.Alarm, "create", classmethod(lambda cls: None))

    async def scenario() -> tuple[list[tuple[str, float]], list[float]]:
        loop = asyncio.get_running_loop()
        sel = loop._selector  # type: ignore[attr-defined]
        assert (sel.alarm is not None) == timerfd
        recording = _Recording(sel._selector)
        sel._selector = recording
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        fired: list[tuple[str, float]] = []  # (name, lateness)
        done = loop.create_future()

        def at(name: str, delay: float) -> asyncio.TimerHandle:
            due = loop.time() + delay
            return loop.call_at(due, lambda: fired.append((name, loop.time() - due)))

        def reader() -> None:
            while True:
                try:
                    data = a.recv(16)
                except BlockingIOError:
                    return
                if data == b"timer":
                    at("from reader", 0.03)

        def hold() -> None:  # the loop's own reader, holding the loop past a timer's deadline (a compile's step)
            c.recv(16)
            time.sleep(0.04)
            selector.serve_waiting(loop)

        # From a thread (the loop's self-pipe wakes it): a loop whose timers stopped still ends.
        watchdog = threading.Timer(3, loop.call_soon_threadsafe, (asyncio.current_task().cancel,))
        watchdog.start()
        selector.add_reader(loop, a.fileno(), reader)
        loop.add_reader(c.fileno(), hold)
        try:
            at("late", 0.30)
            at("first", 0.02)
            cancelled = at("cancelled", 0.05)
            moved = at("moved", 0.04)
            at("close 1", 0.1)
            at("close 2", 0.10005)
            loop.call_later(0.01, cancelled.cancel)
            loop.call_later(0.015, lambda: (moved.cancel(), at("moved later", 0.1)))  # due at 0.115
            loop.call_later(0.13, b.send, b"timer")  # due at about 0.16
            at("held up", 0.19)  # armed when `hold` starts: serve_waiting sees its expiry
            at("after hold", 0.24)
            threading.Timer(0.05, lambda: loop.call_soon_threadsafe(at, "from thread", 0.02)).start()  # due at about 0.07
            threading.Timer(0.18, d.send, (b"x",)).start()
            loop.call_later(0.35, done.set_result, None)
            for _ in range(20):  # datagrams between the timers, each its own wakeup
                b.send(b"q")
                await asyncio.sleep(0.005)
            await done
        finally:
            watchdog.cancel()
            sel._selector = recording._poll
            selector.remove_reader(loop, a.fileno())
            loop.remove_reader(c.fileno())
            for s in (a, b, c, d):
                s.close()
        return fired, recording.waits

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        fired, waits = runner.run(scenario())
    names = [name for name, _ in fired]
    assert names == ["first", "from thread", "close 1", "close 2", "moved later", "from reader", "held up", "after hold",
                     "late"], fired
    late = dict(fired)
    assert all(lateness >= 0 for lateness in late.values()), fired  # never early
    assert max(v for k, v in late.items() if k != "held up") < 0.03, fired  # the one held up did not delay the next
    assert late["held up"] < 0.06, fired  # run as soon as `hold` let go (at about 0.22)
    waiting = [w for w in waits if w != 0]
    assert len(waiting) >= 20, waits
    if timerfd:
        assert set(waiting) == {-1}, waits
    else:
        assert all(w > 0 for w in waiting), waits


def test_a_closed_loop_leaves_no_descriptor() -> None:
    """The selector's timerfd closes with the loop: a loop made and closed a hundred times leaves the
    process's descriptors as they were."""
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(100):
        loop = selector.new_loop()
        assert loop._selector.alarm is not None  # type: ignore[attr-defined]
        loop.close()
    asyncio.set_event_loop(None)
    assert len(os.listdir("/proc/self/fd")) == before
