"""The one poller of the tests, benchmarks and soak: wait for a condition, fail with what was last seen."""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 15.0, interval: float = 0.05,
               what: str | Callable[[], str] = "", ignore: tuple[type[Exception], ...] = ()) -> T:
    """Poll `check` until it returns something truthy; fail with the last value and `what`.

    An exception of a type in `ignore` counts as "not yet" (an API server answering 404/429 right after
    a CRD install) and is shown as the last value.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except ignore as err:
            last = err
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"{text or 'condition'} not met within {timeout}s (last: {last!r})")
        time.sleep(interval)
