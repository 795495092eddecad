"""SOA serial arithmetic (decision 9, RFC 1982): where the next serial comes from and how it is written.

The serial of a change is the Unix time in milliseconds, or one more than the serial before it when
changes come faster than that (`next_serial`); the SOA writes it modulo 2**32 (`SERIAL_MASK`).
"""

from __future__ import annotations

import time
from typing import Iterable, Protocol

from ..store import ServiceKey

MAX_SERIAL_STEP = 2**31 - 1  # the largest step RFC 1982 reads as newer
SERIAL_MASK = 0xFFFFFFFF  # a serial as the SOA writes it: 32 bits


class SerialLog(Protocol):
    """What the table tells of its serial changes (journal.Journal, IXFR's history)."""

    def reset(self, serial: int) -> None: ...  # the initial sync

    def record(self, services: Iterable[ServiceKey], before: int, after: int) -> None: ...

    def renumber(self, before: int, after: int) -> None: ...  # set_serial: the same contents, another serial


def clock_serial() -> int:
    """The SOA serial a change made now may take (decision 9): the Unix time in milliseconds, written
    modulo 2**32 (RFC 1982 arithmetic: a serial is newer while less than 2**31 ms, 24.8 days, ahead,
    far beyond the SOA expire of one day). Each change takes max(previous + 1, this), so the serial
    runs ahead of the clock only while changes come faster than 1,000 a second, and catches up when
    they slow; a restarted process, which takes its first serial from the clock after its sync,
    therefore starts above every serial the one before it gave out (docs/transfers.md)."""
    return int(time.time() * 1000)


def next_serial(serial: int) -> int:
    """The serial of a change after `serial`: the clock's, or `serial + 1` while the clock is behind.

    Never a step of 2**31 or more: written modulo 2**32, it would read as older (RFC 1982), as after
    a quiet spell of 24.8 days; the clock is caught up over later changes instead."""
    return max(serial + 1, min(clock_serial(), serial + MAX_SERIAL_STEP))
