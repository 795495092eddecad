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
import math
import select
import selectors
import time
from typing import Any, Callable

# Linux only (epoll); elsewhere `new_loop` is asyncio's default loop.
_BASE: type[selectors.BaseSelector] = getattr(selectors, "EpollSelector", selectors.DefaultSelector)
_EPOLLIN = getattr(select, "EPOLLIN", 0x001)
_EPOLLOUT = getattr(select, "EPOLLOUT", 0x004)
_monotonic = time.monotonic  # asyncio's clock: the loop's timeout is measured on it


class DispatchSelector(_BASE):  # type: ignore[misc, valid-type]
    """The epoll selector, plus readers it calls itself (`direct`).

    While only direct readers have work, `select` stays in its own loop (epoll_wait, the readers,
    epoll_wait again) until the loop's timeout is over, another descriptor is ready, or a reader
    left the loop something to run (a callback on `_ready`, a new timer): the wakeups of a UDP
    listener at light load then cost an epoll_wait and the reader, not a turn of the event loop
    (`_run_once`'s timer and ready-queue bookkeeping), and the loop still runs everything else
    when it would have.
    """

    def __init__(self) -> None:
        super().__init__()
        self.direct: dict[int, tuple[asyncio.AbstractEventLoop, Callable[..., Any], tuple]] = {}
        # The loop's ready queue and timer heap (asyncio's own, read-only here), known once a direct
        # reader is added: what `select` checks before waiting again. None: it never waits again.
        self._queues: tuple[Any, list] | None = None
        self.reading = False  # a direct reader runs: `serve_waiting` must not call one again inside it

    def watch_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let `select` wait again while `loop` has nothing to run (where the loop keeps the queues
        as CPython's asyncio does; otherwise `select` returns after every wakeup, as the stock one)."""
        ready, scheduled = getattr(loop, "_ready", None), getattr(loop, "_scheduled", None)
        if isinstance(scheduled, list) and hasattr(ready, "__len__"):
            self._queues = (ready, scheduled)

    def select(self, timeout: float | None = None) -> list:
        """epoll_wait, then each direct reader's callback for its descriptor, again while nothing else
        is due (see the class); the other events, as the stock EpollSelector.select returns them (same
        timeout rounding, same EINTR handling)."""
        direct = self.direct
        if not direct:
            return super().select(timeout)
        if timeout is None:
            wait = -1.0
            deadline = None
        elif timeout <= 0:
            wait = 0.0
            deadline = 0.0  # one look, no waiting
        else:
            wait = math.ceil(timeout * 1e3) * 1e-3  # epoll's millisecond resolution, rounded up
            deadline = _monotonic() + wait
        queues = self._queues if deadline != 0.0 else None
        if queues is not None:
            ready_queue, timers = queues
            timer_count = len(timers)
        poll = self._selector.poll
        keys = self._fd_to_key
        ready: list = []
        while True:
            try:
                events = poll(wait, max(len(keys), 1))
            except InterruptedError:
                return ready
            for fd, event in events:
                entry = direct.get(fd)
                if entry is not None:
                    self.reading = True
                    _call(*entry)
                    self.reading = False
                    continue
                key = keys.get(fd)
                if key:
                    mask = (selectors.EVENT_WRITE if event & ~_EPOLLIN else 0) | (selectors.EVENT_READ if event & ~_EPOLLOUT else 0)
                    ready.append((key, mask & key.events))
            if ready or not events or queues is None or ready_queue or len(timers) != timer_count or not direct:
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
        for fd, _ in events:  # (other descriptors stay ready: epoll reports them to the next select)
            entry = direct.get(fd)
            if entry is not None:
                self.reading = True
                _call(*entry)
                self.reading = False


def _call(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], args: tuple) -> None:
    """One direct reader's wakeup; an exception goes to the loop's handler as a Handle's would."""
    try:
        callback(*args)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - as asyncio.Handle._run: reported, the loop goes on
        loop.call_exception_handler({"message": f"Exception in UDP reader {callback!r}", "exception": exc})


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
    selector.direct[fd] = (loop, callback, args)


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
