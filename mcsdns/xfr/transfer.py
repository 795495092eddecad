"""Zone transfers (contract decision 8): AXFR (RFC 5936), IXFR (RFC 1995) and TSIG (RFC 8945).

Off unless `--transfer-to` names who may transfer: then `Transfers` answers every
AXFR and IXFR question for a served zone, and every query signed with TSIG (a
secondary signs its SOA refresh queries too, and rejects an unsigned reply).
Everything else stays the resolver's.

What a transfer holds is `zonefile.zone_records`: the records `mcsdns zone`
prints, built from the same compiled service answers the query path serves
(`compiler.compile_service`, per-endpoint names with their cluster id), so a
secondary answers what mcsdns answers. The whole zone is packed from a snapshot,
once per serial, as transfers read it (stream.py). Per request only the ID, the flags,
the question (as the client spelled it) and the TSIG record differ.

Who may transfer what is policy.py's decision list; request parsing is request.py's,
signatures tsig.py's. `Transfers` is what the listeners call: which queries are its,
and the writing of the replies: at most --max-transfers at once over TCP (one more is
REFUSED, and a secondary retries), taking turns at the event loop (`Turns`) so that
queries wait for one message of one transfer, not for a message of each.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import dns.tsig

from ..config import Config
from ..zone import vocab
from ..zone.table import Table
from ..zone.wire import U16
from .policy import Incremental, Policy, Whole, dress
from .request import Unreadable, rcode_reply, read_request, signed
from .stream import AxfrStream, ReverseSnapshot, Snapshot, soa_message

if TYPE_CHECKING:
    from ..serve.tcp import Stream  # the connection a transfer writes to (write + drain)

log = logging.getLogger(__name__)


class Turns:
    """The transfers written at once take turns at the event loop: one step at a time (one message
    dressed, signed and written, or one step of packing, `AxfrStream.step`), the next one's in the
    next loop iteration. A query that arrives meanwhile waits for one step, however many transfers
    are under way: without turns every transfer ready to go steps in the same iteration, and a query
    waits for all of them. The many transfers then share the loop's time spent on transfers, each
    going slower as more run, which the limit on transfers at once bounds."""

    def __init__(self) -> None:
        self.busy = False
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if not self.busy:
            self.busy = True
            return
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn  # handed over by `_give`: the turn is ours
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give()  # handed over, then cancelled: the next one's
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._give()
        await asyncio.sleep(0)  # this task's next step is in another iteration, whoever goes next

    def _give(self) -> None:
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # its task runs in the next loop iteration
                return
        self.busy = False


class Transfers(Policy):
    """The transfers the listeners hand over: which queries are ours, and the replies written (policy.py decides)."""

    def __init__(self, table: Table, allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
                 key: dns.tsig.Key | None = None, on_result: Callable[[str, str], None] | None = None,
                 max_transfers: int = Config.max_transfers) -> None:
        super().__init__(table, allowed, key, on_result)
        self._streams: dict[bytes, AxfrStream] = {}  # the newest serial's AXFR messages, by zone
        self.max_transfers = max_transfers
        self.active = 0  # transfers (and signed replies) being written: the metrics read it
        self.turns = Turns()

    # ----------------------------------------------------------------- which queries are ours

    def handles(self, data: bytes) -> bool:
        """True for an AXFR/IXFR question in a served zone, and for any signed query (see the module docstring)."""
        if len(data) < 17 or data[2] & 0x80 or data[4:6] != b"\x00\x01":
            return False
        i = 12
        n = len(data)
        while i < n and 0 < data[i] < 64:
            i += data[i] + 1
        if i + 5 <= n and data[i] == 0:
            qtype = (data[i + 1] << 8) | data[i + 2]
            if qtype in (vocab.AXFR, vocab.IXFR):
                return self.table.zone_of(data[12 : i + 1].lower()) is not None
        return signed(data)

    # ----------------------------------------------------------------- serving

    async def serve_tcp(self, data: bytes, client: Any, writer: "Stream", timeout: float,
                        answer: Callable[[bytes], bytes | None]) -> None:
        """Write the reply (one message or a transfer's many) to `writer`, each drained within `timeout`.

        `answer`: the resolver for a signed query that is not a transfer (its reply is signed here).
        """
        if self.active >= self.max_transfers:
            self._count(data, "busy")
            writer.write(_framed(rcode_reply(data, vocab.REFUSED)))
            return
        self.active += 1
        try:
            for message in self.decide(data, client, True, answer):
                if message is None:
                    return
                if isinstance(message, Whole):
                    self._result(message.kind, message.result)
                    async with self.turns:
                        stream = self._stream(message.req.lname)
                    index = 0  # each message signed as it goes: its MAC chains to the one before
                    while True:
                        async with self.turns:  # (drain waits only once the socket is full, which a fast
                            whole = stream.step(index)  # reader never lets happen: the turns yield)
                            if whole:
                                writer.write(_framed(dress(whole, message.req, message.ctx)))
                        if whole is None:
                            break
                        if whole:
                            index += 1
                            await asyncio.wait_for(writer.drain(), timeout)
                    continue
                if isinstance(message, Incremental):
                    for part in await message.pack():
                        writer.write(_framed(dress(part, message.req, message.ctx)))
                        await asyncio.wait_for(writer.drain(), timeout)
                    continue
                writer.write(_framed(message))
                await asyncio.wait_for(writer.drain(), timeout)
        except (ConnectionError, asyncio.TimeoutError):
            raise  # the transport's to handle: the connection is dropped
        except Exception:  # a bug must not take the listener down: logged, the connection closed
            log.exception("transfer failed")
            raise ConnectionError("transfer failed") from None
        finally:
            self.active -= 1

    def over_udp(self, data: bytes, answer: Callable[[bytes], bytes | None]) -> bytes | None:
        """The one reply to `data` over UDP (the resolver calls this for what `handles`)."""
        replies = list(self.decide(data, None, False, answer))
        return replies[0] if replies else None

    def soa_message(self, lname: bytes) -> bytes:
        """The zone's current SOA as a one-answer message (ID 0, question `zone AXFR IN`): NOTIFY's base."""
        return soa_message(self.table, self.zones.get(lname) or self.reverse_zones[lname])

    def _stream(self, lname: bytes) -> AxfrStream:
        """The zone's messages at the table's current serial: the stream of a transfer still under way or
        done at this serial, else a new one from a snapshot taken now."""
        stream = self._streams.get(lname)
        if stream is None or stream.generation != self.table.generation:
            if lname in self.reverse_zones:
                snapshot: Snapshot | ReverseSnapshot = ReverseSnapshot(self.table, lname)
                zone = self.reverse_zones[lname]
            else:
                snapshot, zone = Snapshot(self.table), self.zones[lname]
            stream = self._streams[lname] = AxfrStream(snapshot, zone)
        return stream

    def _count(self, data: bytes, result: str) -> None:
        try:
            qtype = read_request(data).qtype
        except Unreadable:
            return
        self._result({vocab.AXFR: "axfr", vocab.IXFR: "ixfr"}.get(qtype, "query"), result)


def _framed(message: bytes) -> bytes:
    return U16.pack(len(message)) + message
