"""NOTIFY (RFC 1996): tell the `--notify` secondaries that the zone changed, so they transfer it now.

The table calls `Notifier.changed` on every new serial. The notifier waits WINDOW for
more changes (a sync or a rollout is many changes in a row), then sends each target one
NOTIFY per served zone with the new SOA in the answer section (Knot ignores a NOTIFY whose
serial it already has), signed with the TSIG key if there is one. A target that does not
answer is asked again after 1, 2, 4, 8 and 16 seconds, then given up on (counted failed;
the SOA refresh timer remains its fallback). A reply with an error rcode is final (a
secondary that refuses us will refuse again). A newer change cancels the retries of the
older one: only the newest serial is worth announcing. Rounds start at most every
MIN_INTERVAL, so a storm of changes costs each target at most 1/MIN_INTERVAL NOTIFY a second,
and their sockets nothing on the query path (each NOTIFY has its own socket, its own task).

A target named by a host name rather than an address is resolved at every round, off the event
loop (`loop.getaddrinfo`, bounded by RESOLVE_TIMEOUT), and every address it has then is sent the
NOTIFY: a headless Service over per-node secondaries (a Knot DaemonSet) names all of them, as its
pods come and go. A name that does not resolve is counted (`unresolved`), logged, and looked up
again on the retry schedule (a cluster DNS that timed out once does not leave the secondaries
behind until the next change); queries are never held up by the lookup.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import struct
import time
from typing import Awaitable, Callable

import dns.exception
import dns.message
import dns.rcode
import dns.tsig

from ..config import hostport_text
from ..zone import vocab
from .transfer import Transfers
from .tsig import sign_request

log = logging.getLogger(__name__)

WINDOW = 0.05  # seconds a change waits for more before the NOTIFY goes out
MIN_INTERVAL = 0.25  # seconds between two rounds of NOTIFY
RETRIES = (1.0, 2.0, 4.0, 8.0, 16.0)  # waits for an answer before each retry; then failed
OPCODE_NOTIFY = 4
RESOLVE_TIMEOUT = 5.0  # seconds a target's host name may take to resolve before the round skips it
MAX_ADDRESSES = 256  # addresses of one target's name sent a NOTIFY per round (a node per address)

Address = tuple[int, tuple]  # (socket family, socket address)


class Notifier:
    def __init__(self, transfers: Transfers, targets: tuple[tuple[str, int], ...],
                 on_result: Callable[[str], None] | None = None) -> None:
        self.transfers = transfers
        self.targets = targets
        self.on_result = on_result  # metrics: "sent", "acknowledged", "failed", "error"
        self._changed = asyncio.Event()
        self._changed_at = 0.0  # the first change not announced yet (time.monotonic)
        self._round: list[asyncio.Task] = []
        # --workers: waits until every worker serves the new serial (Supervisor._caught_up), so the
        # secondary's SOA query after the NOTIFY does not meet a worker still on the old one.
        self.caught_up: Callable[[], Awaitable[None]] | None = None

    def changed(self) -> None:
        """The table has a new serial (Table.on_bump)."""
        if not self._changed.is_set():
            self._changed_at = time.monotonic()
        self._changed.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Send a round after each burst of changes until `stop`.

        A round goes out WINDOW after the first change of the burst, or MIN_INTERVAL after the round
        before if that is later: the cap delays only a change that follows a round within MIN_INTERVAL,
        and by no more than the rest of the interval (waiting the whole interval after every round, then
        the window, would hold a change that comes soon after a round for longer than the interval
        itself, though a secondary that answers within MIN_INTERVAL is ready for it)."""
        last_round = -MIN_INTERVAL
        try:
            while not stop.is_set():
                await self._changed.wait()
                await asyncio.sleep(max(self._changed_at + WINDOW, last_round + MIN_INTERVAL) - time.monotonic())
                self._changed.clear()  # the changes of the window go out in this round
                if not self.transfers.table.synced:
                    continue
                if self.caught_up is not None:
                    await self.caught_up()
                for task in self._round:
                    task.cancel()  # an older serial: not worth announcing any more
                self._round = [asyncio.create_task(self._notify_target(target))
                               for target in self.targets]
                last_round = time.monotonic()
        finally:
            for task in self._round:
                task.cancel()

    async def _notify_target(self, target: tuple[str, int]) -> None:
        """One round for one `--notify` target: its addresses now, each sent a NOTIFY per served zone."""
        host, port = target
        for attempt, wait in enumerate((0.0, *RETRIES)):
            await asyncio.sleep(wait)  # a lookup that failed is tried again on the NOTIFY retry schedule
            try:
                addresses = await resolve(host, port)
                break
            except (OSError, asyncio.TimeoutError, UnicodeError) as exc:
                self._count("unresolved")
                later = f"trying again in {RETRIES[attempt]:g} s" if attempt < len(RETRIES) else "giving up until the next change"
                log.warning("NOTIFY to %s: %s does not resolve (%s); %s", hostport_text(host, port), host,
                            exc or "timed out", later)
        else:
            return
        await asyncio.gather(*(self._notify(family, address, lname)
                               for family, address in addresses for lname in self.transfers.zones))

    async def _notify(self, family: int, address: tuple, lname: bytes) -> None:
        host, port = address[0], address[1]
        message = bytearray(self.transfers.soa_message(lname))
        qid = random.getrandbits(16)
        struct.pack_into(">HH", message, 0, qid, (OPCODE_NOTIFY << 11) | 0x0400)  # opcode NOTIFY, AA
        at = 12 + len(lname)
        struct.pack_into(">H", message, at, vocab.SOA)  # the question `zone SOA IN` (RFC 1996 3.7)
        wire, mac = bytes(message), b""
        key = self.transfers.key
        loop = asyncio.get_running_loop()
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            for wait in RETRIES:
                if key is not None:
                    wire, mac = sign_request(bytes(message), key)  # signed anew: the time must be fresh
                try:
                    await loop.sock_sendto(sock, wire, address)
                except OSError as exc:
                    log.debug("NOTIFY to %s:%d: %s", host, port, exc)
                    await asyncio.sleep(wait)
                    continue
                self._count("sent")
                log.debug("NOTIFY to %s:%d sent", host, port)  # its timestamp is when the NOTIFY left
                reply = await self._reply(loop, sock, qid, wait, mac)
                if reply is None:
                    continue
                if reply.rcode() == dns.rcode.NOERROR:
                    self._count("acknowledged")
                    log.debug("NOTIFY to %s:%d acknowledged", host, port)
                else:
                    self._count("error")
                    log.warning("NOTIFY to %s:%d answered %s", host, port, dns.rcode.to_text(reply.rcode()))
                return
        self._count("failed")
        log.warning("NOTIFY to %s:%d: no answer after %d tries", host, port, len(RETRIES))

    async def _reply(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, qid: int, wait: float,
                     mac: bytes) -> dns.message.Message | None:
        """The answer to our NOTIFY within `wait` seconds (others on the socket ignored), else None."""
        deadline = loop.time() + wait
        key = self.transfers.key
        keyring = {key.name: key} if key is not None else None
        while (left := deadline - loop.time()) > 0:
            try:
                data, _ = await asyncio.wait_for(loop.sock_recvfrom(sock, 65535), left)
            except (asyncio.TimeoutError, OSError):
                return None
            try:
                reply = dns.message.from_wire(data, keyring=keyring, request_mac=mac)
            except (dns.exception.DNSException, dns.tsig.PeerError) as exc:
                log.debug("NOTIFY reply not accepted: %s", exc)
                continue
            if reply.id == qid and reply.flags & 0x8000 and reply.opcode() == OPCODE_NOTIFY:
                return reply
        return None

    def _count(self, result: str) -> None:
        if self.on_result is not None:
            self.on_result(result)


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses to NOTIFY for `host`: itself if it is an address; else every address its name has
    now (A and AAAA, each once, in the resolver's order, at most MAX_ADDRESSES), looked up in the
    loop's executor so the event loop keeps answering. OSError (socket.gaierror) or TimeoutError when
    the name does not resolve in RESOLVE_TIMEOUT."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (host, port))]
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM, proto=socket.IPPROTO_UDP),
                                   RESOLVE_TIMEOUT)
    out: dict[tuple, int] = {}
    for family, _type, _proto, _name, address in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            out.setdefault(address, family)
    if not out:
        raise OSError(f"no IPv4 or IPv6 address for {host}")
    return [(family, address) for address, family in list(out.items())[:MAX_ADDRESSES]]
