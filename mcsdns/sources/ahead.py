"""Run a blocking generator one item ahead of its consumer, on a helper thread.

A paginated list is a chain of round trips: page N+1 can only be asked for with
the continue token of page N. Read in turn with the conversion of each page,
every round trip is time the process spends waiting (the API server takes
about as long to serve a page of 500 EndpointSlices as mcsdns takes to convert
it). `ahead` lets the helper thread ask for the next page while the consumer
converts the current one, so the waits overlap with the work. At most `depth`
items wait in the queue, plus the one the helper is producing: memory stays
bounded by a few pages, whatever the size of the list.

Whatever the generator raises is raised to the consumer at the point in the
sequence where it happened. When the consumer stops early (it returned,
raised, or `stop` was set), the helper stops at its next item and closes the
generator on its own thread; a request it is blocked in finishes first (bounded
by that request's own timeout).
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")

_DONE = object()
_POLL = 0.1  # seconds between checks of the stop signals while the queue is full


def ahead(items: Iterator[T], stop: threading.Event, name: str, depth: int = 1) -> Iterator[T]:
    """The items of `items`, produced on a thread `name` up to `depth` + 1 ahead of the caller."""
    handoff: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    cancelled = threading.Event()

    def offer(entry: tuple[object, BaseException | None]) -> bool:
        while not (cancelled.is_set() or stop.is_set()):
            try:
                handoff.put(entry, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
            offer((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who raises it
            offer((_DONE, exc))
        finally:
            items.close()  # type: ignore[attr-defined]

    threading.Thread(target=produce, name=name, daemon=True).start()
    try:
        while True:
            try:
                item, error = handoff.get(timeout=_POLL)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item  # type: ignore[misc]
    finally:
        cancelled.set()
