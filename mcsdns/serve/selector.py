"""The event loop mcsdns runs on: asyncio's, with UDP readers called straight from the selector.

At light load every datagram is its own wakeup, and asyncio's path from epoll to a reader (a
selector key and event tuple, the loop's `_process_events`, a Handle queued on `_ready` and run
through its context) costs about as much as a cached answer's own Python work. A `DispatchSelector` calls a reader registered
with `add_reader` here from its `select()` as epoll reports the descriptor, and hands every
other descriptor to the loop as the stock selector does. Still on the loop thread, inside the
loop's own iteration: every socket write stays on the loop thread (the supervisor's forks rely
on that), and callbacks and tasks a reader schedules run in the same iteration as with the stock selector.

Only where the running loop is a `SelectorEventLoop` on a `DispatchSelector` (the loop `new_loop`
makes, which the command line runs); on any other loop (uvloop, an embedding program's, the tests'
`asyncio.run`) `add_reader` and `remove_reader` are the loop's own.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import math
import os
import select
import selectors
import time
from typing import Any, Callable

# Linux only (epoll); elsewhere `new_loop` is asyncio's default loop.
_BASE: type[selectors.BaseSelector] = getattr(selectors, "EpollSelector", selectors.DefaultSelector)
_EPOLLIN = getattr(select, "EPOLLIN", 0x001)
_EPOLLOUT = getattr(select, "EPOLLOUT", 0x004)
_EPOLLET = getattr(select, "EPOLLET", 1 << 31)
_monotonic = time.monotonic  # asyncio's clock (CLOCK_MONOTONIC on Linux): the loop's timeout is measured on it


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class Alarm:
    """The event loop's next deadline as a timerfd in the selector's epoll set.

    A wait with a timeout makes the kernel start and cancel a timer on every epoll_wait, and at light
    load every datagram is its own wait. With the deadline in a timerfd (CLOCK_MONOTONIC, absolute,
    armed only when the loop's earliest timer changes) epoll_wait waits with no timeout. Edge-triggered:
    an expiry is reported once, and arming again resets it, so the descriptor is never read. Whoever
    polls the epoll set and sees (or may have missed) the expiry sets `armed` to None, so the next
    `select` arms again: a time already past expires at once.
    """

    def __init__(self, fd: int, settime: Callable[..., int]) -> None:
        self.fd = fd
        self._settime = settime
        self._spec = _Itimerspec()
        self._ref = ctypes.byref(self._spec)
        self.armed: float | None = None  # the absolute time (time.monotonic's) it expires at, if pending

    @classmethod
    def create(cls) -> Alarm | None:
        """A timerfd, or None where there is none (not Linux, no C library to call it in)."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            create, settime = libc.timerfd_create, libc.timerfd_settime
        except (OSError, AttributeError):
            return None
        create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        settime.argtypes, settime.restype = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        fd = create(_CLOCK_MONOTONIC, os.O_CLOEXEC | os.O_NONBLOCK)  # TFD_CLOEXEC, TFD_NONBLOCK: the O_ values
        return cls(fd, settime) if fd >= 0 else None

    def arm(self, when: float) -> None:
        """Expire at `when` (on time.monotonic's clock; a time already past expires at once)."""
        seconds = int(when)
        value = self._spec.it_value
        # Rounded up, never early; all zero would disarm.
        value.tv_sec, value.tv_nsec = seconds, min(max(math.ceil((when - seconds) * 1e9), 1), 999_999_999)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.armed = when

    def close(self) -> None:
        os.close(self.fd)


_CLOCK_MONOTONIC = getattr(time, "CLOCK_MONOTONIC", 1)
_TFD_TIMER_ABSTIME = 1


class DispatchSelector(_BASE):  # type: ignore[misc, valid-type]
    """The epoll selector, plus readers it calls itself (`direct`).

    While only direct readers have work, `select` stays in its own loop (epoll_wait, the readers,
    epoll_wait again) until the loop's timeout is over, another descriptor is ready, or a reader
    left the loop something to run (a callback on `_ready`, a new timer): the wakeups of a UDP
    listener at light load then cost an epoll_wait and the reader, not a turn of the event loop
    (`_run_once`'s timer and ready-queue bookkeeping), and the loop still runs everything else
    when it would have. The timeout is an `Alarm` in the epoll set where there is a timerfd.
    """

    def __init__(self) -> None:
        super().__init__()
        # Descriptor -> its reader with its arguments bound, called with none: one call per wakeup.
        self.direct: dict[int, Callable[[], Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # whose exception handler hears a reader's error
        # The loop's ready queue and timer heap (asyncio's own, read-only here), known once a direct
        # reader is added: what `select` checks before waiting again. None: it never waits again.
        self._queues: tuple[Any, list] | None = None
        self.reading = False  # a direct reader runs: `serve_waiting` must not call one again inside it
        self.alarm = Alarm.create()
        if self.alarm is not None:
            self._selector.register(self.alarm.fd, select.EPOLLIN | _EPOLLET)

    def close(self) -> None:
        super().close()
        if self.alarm is not None:
            self.alarm.close()
            self.alarm = None

    def watch_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let `select` wait again while `loop` has nothing to run (where the loop keeps the queues
        as CPython's asyncio does; otherwise `select` returns after every wakeup, as the stock one)."""
        self._loop = loop
        ready, scheduled = getattr(loop, "_ready", None), getattr(loop, "_scheduled", None)
        if isinstance(scheduled, list) and hasattr(ready, "__len__"):
            self._queues = (ready, scheduled)

    def select(self, timeout: float | None = None) -> list:
        """epoll_wait, then each direct reader's callback for its descriptor, again while nothing else
        is due (see the class); the other events, as the stock EpollSelector.select returns them (same
        EINTR handling; without an alarm, the same timeout rounding)."""
        direct = self.direct
        alarm = self.alarm
        if not direct:
            if alarm is not None:
                alarm.armed = None  # its expiry, if it comes, goes unseen by the stock select
            return super().select(timeout)
        if timeout is None:
            wait = -1.0
            deadline = None
        elif timeout <= 0:
            wait = 0.0
            deadline = 0.0  # one look, no waiting
        elif alarm is not None:
            wait = -1.0
            deadline = None
            # The loop's timeout is to its earliest timer: armed already unless that timer changed.
            queues = self._queues
            when = queues[1][0].when() if queues is not None and queues[1] else _monotonic() + timeout
            if when != alarm.armed:
                alarm.arm(when)
        else:
            wait = math.ceil(timeout * 1e3) * 1e-3  # epoll's millisecond resolution, rounded up
            deadline = _monotonic() + wait
        queues = self._queues if deadline != 0.0 else None
        if queues is not None:
            ready_queue, timers = queues
            timer_count = len(timers)
        poll = self._selector.poll
        keys = self._fd_to_key
        most = max(len(keys), 1)  # (a reader adds no descriptor: what it starts runs after this returns)
        ready: list = []
        due = False
        while True:
            try:
                events = poll(wait, most)
            except InterruptedError:
                return ready
            for fd, event in events:
                reader = direct.get(fd)
                if reader is not None:
                    self.reading = True
                    try:
                        reader()
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:  # noqa: BLE001 - as asyncio.Handle._run: reported, the loop goes on
                        self._failed(reader, exc)
                    self.reading = False
                    continue
                key = keys.get(fd)
                if key:
                    mask = (selectors.EVENT_WRITE if event & ~_EPOLLIN else 0) | (selectors.EVENT_READ if event & ~_EPOLLOUT else 0)
                    ready.append((key, mask & key.events))
                elif alarm is not None and fd == alarm.fd:
                    alarm.armed = None
                    due = True
            if ready or due or not events or queues is None or ready_queue or len(timers) != timer_count or not direct:
                return ready
            if deadline is not None:
                left = deadline - _monotonic()
                if left <= 0:
                    return ready
                wait = math.ceil(left * 1e3) * 1e-3

    def serve_waiting(self) -> None:
        """Call the direct readers whose descriptors have data now, without waiting (`serve_waiting`)."""
        direct = self.direct
        if self.reading or not direct:
            return
        try:
            events = self._selector.poll(0, max(len(self._fd_to_key), 1))
        except InterruptedError:
            return
        alarm = self.alarm
        for fd, _ in events:  # (other descriptors stay ready: epoll reports them to the next select)
            reader = direct.get(fd)
            if reader is not None:
                self.reading = True
                try:
                    reader()
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # noqa: BLE001
                    self._failed(reader, exc)
                self.reading = False
            elif alarm is not None and fd == alarm.fd:
                alarm.armed = None  # seen here, not by `select`: the loop finds its timer due next turn

    def _failed(self, reader: Callable[[], Any], exc: BaseException) -> None:
        """A direct reader raised: to the loop's exception handler, as a Handle's callback would be."""
        if self._loop is not None:
            self._loop.call_exception_handler({"message": f"Exception in UDP reader {reader!r}", "exception": exc})


def new_loop() -> asyncio.AbstractEventLoop:
    """A SelectorEventLoop on a DispatchSelector (where epoll exists), made this thread's event loop
    (as asyncio.run's is)."""
    loop = asyncio.SelectorEventLoop(DispatchSelector()) if hasattr(selectors, "EpollSelector") else asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


def _selector(loop: asyncio.AbstractEventLoop) -> DispatchSelector | None:
    selector = getattr(loop, "_selector", None)
    return selector if isinstance(selector, DispatchSelector) else None


def add_reader(loop: asyncio.AbstractEventLoop, fd: int, callback: Callable[..., Any], *args: Any) -> None:
    """`loop.add_reader`, called from the selector where the loop has a DispatchSelector."""
    selector = _selector(loop)
    if selector is None:
        loop.add_reader(fd, callback, *args)
        return
    remove_reader(loop, fd)
    selector.watch_loop(loop)
    selector.register(fd, selectors.EVENT_READ, None)
    selector.direct[fd] = functools.partial(callback, *args) if args else callback


def serve_waiting(loop: asyncio.AbstractEventLoop) -> None:
    """Answer the datagrams waiting on `loop`'s direct readers now, from inside a callback of the loop.

    Work that holds the loop for milliseconds (compiling a large service) calls this between its
    steps, so a query waits for one step rather than for the whole of it. The readers answer from
    whatever state the caller left between steps, which must be one a query may see. Nothing where
    the loop has no DispatchSelector, and nothing from inside a direct reader (a question that makes
    the table compile): that reader's own buffers are in use.
    """
    selector = _selector(loop)
    if selector is not None:
        selector.serve_waiting()


def remove_reader(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    """`loop.remove_reader` for a reader `add_reader` added: whether one was."""
    selector = _selector(loop)
    if selector is None or fd not in selector.direct:
        return loop.remove_reader(fd)
    del selector.direct[fd]
    selector.unregister(fd)
    return True
