"""Who may transfer what: the decision list of a transfer request (contract decision 8).

The decisions, in the order they are taken (`Policy.decide`):

1. the client's address is not in `--transfer-to`: REFUSED (unsigned);
2. `--tsig-key-file` is set and the request is unsigned: REFUSED. A request
   signed with another key or algorithm: NOTAUTH with TSIG error BADKEY, a MAC
   that does not verify: NOTAUTH with BADSIG (both unsigned, RFC 8945 5.2);
   a MAC that verifies but a time outside its fudge: NOTAUTH with BADTIME,
   signed, our time in the other data (5.2.3). Without a key configured, a
   signed request is BADKEY;
3. class not IN: REFUSED (as the query path refuses other classes); the name is
   not the apex of a served zone (forward, or reverse with --reverse-cidr): NOTAUTH; not synced yet: SERVFAIL (a
   transfer before the initial list would hand out a partial zone);
4. AXFR over UDP: NOTIMP (RFC 5936 4.2 defines none; Knot answers the same);
   IXFR whose authority section is not one SOA of the zone: FORMERR;
5. shutting down (the lameduck after SIGTERM, `leaving`): REFUSED, but for an IXFR the journal
   answers. The pod still answers queries while clients move away; a secondary that follows it keeps
   getting its changes until it moves, but whoever chooses a primary (an AXFR, a probe at our serial:
   deploy/examples/knot-secondary.yaml, `mcsdns follow-primary`) is turned to a pod that stays rather
   than to one about to vanish;
6. IXFR over UDP, or from a client at our serial: our SOA alone (RFC 1995 2, 4);
   from a serial the journal holds (journal.py): the changes since, condensed into
   one difference (RFC 1995 4); any other (newer than ours, purged from the journal,
   never ours): the whole zone in AXFR form, as RFC 1995 4 allows, counted by reason;
7. AXFR over TCP: the SOA, every record, the SOA again, in messages of at most
   16 KiB (stream.PACK_LIMIT), the question in the first only, each signed when the request was
   (RFC 8945 5.3.1: every message, the digest chained).

UDP has no client address in the resolver, so over UDP step 1 is skipped: the
answers there are our SOA or an error, which any SOA query shows anyway.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import dns.tsig

from ..serve.querylog import errors
from ..zone import vocab
from ..zone.table import Table
from ..zone.wire import AA, QR, RD, U16
from .request import Request, Unreadable, arcount, ixfr_serial, rcode_reply, read_request
from .stream import pack_all, soa_message, soa_record, wire_labels
from .tsig import BADKEY, BADSIG, BADTIME, NOTAUTH, Signer
from .zonefile import Owned

if TYPE_CHECKING:
    from .journal import Journal

log = logging.getLogger(__name__)


class Policy:
    """The decision list (the module docstring) over one table, its `--transfer-to` networks and key."""

    def __init__(self, table: Table, allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
                 key: dns.tsig.Key | None = None, on_result: Callable[[str, str], None] | None = None) -> None:
        self.table = table
        self.allowed = allowed
        self.key = key
        self.on_result = on_result  # metrics: (type, result) of every transfer request
        self.zones = {z: name for z, name in zip(table.zones, table.config.zones)}  # apex wire form -> name
        # --reverse-cidr: the reverse zones, transferred whole (no IXFR journal: an IXFR behind our
        # serial gets the whole zone, as RFC 1995 4 allows); not NOTIFY'd (`zones` are).
        self.reverse_zones = {z: ".".join(label.decode() for label in wire_labels(z)) for z in table.reverse_zones}
        self.clock: Callable[[], float] = time.time
        self.journal: Journal | None = None  # IXFR's history; None: every IXFR not current falls back
        self.on_fallback: Callable[[str], None] | None = None  # metrics: why an IXFR got the whole zone
        self.leaving = False  # set at SIGTERM (App.leave): transfers are REFUSED from then on, journal IXFRs aside

    def allows(self, client: Any) -> bool:
        """The peer address (a socket address tuple) is in --transfer-to."""
        try:
            address = ipaddress.ip_address(client[0].split("%")[0])
        except (TypeError, ValueError, IndexError):
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in net for net in self.allowed)

    def decide(self, data: bytes, client: Any, tcp: bool, answer: Callable[[bytes], bytes | None]):
        """The reply messages to `data`, in order (a generator: a transfer's are signed as they go out)."""
        try:
            req = read_request(data)
        except Unreadable:
            yield rcode_reply(data, vocab.FORMERR) if len(data) >= 12 else None
            return
        kind = {vocab.AXFR: "axfr", vocab.IXFR: "ixfr"}.get(req.qtype, "query")
        if tcp and kind != "query" and not self.allows(client):
            self._result(kind, "refused")
            yield rcode_reply(data, vocab.REFUSED, req)
            return
        ctx = Signer(self.key, req) if req.tsig_start else None
        if ctx is not None:
            error = ctx.verify(self.clock())
            if error:
                result = {BADKEY: "badkey", BADSIG: "badsig", BADTIME: "badtime"}[error]
                self._result(kind, result)
                # A wrong secret, a skewed clock or a replayed request: the operator's to see (rate-limited).
                errors.log(f"tsig {result}", logging.WARNING, "%s request refused: TSIG %s from %s (key %s, signed at %d, "
                           "our time %d)", kind, result.upper(), client[0] if client else "a UDP client",
                           req.key_name, req.tsig.time_signed, int(self.clock()))
                yield ctx.error_reply(error, self.clock())
                return
        elif self.key is not None and kind != "query":
            self._result(kind, "unsigned")
            yield rcode_reply(data, vocab.REFUSED, req)
            return
        if kind == "query":  # a signed query that is no transfer: the resolver's reply, signed
            reply = answer(data[:10] + U16.pack(arcount(data) - 1) + data[12 : req.tsig_start])
            if type(reply) is not bytes:  # forwarded (the upstream has not our key) or dropped
                reply = rcode_reply(data, vocab.REFUSED, req)
            yield ctx.sign(reply) if ctx is not None else reply
            return
        yield from self._transfer(req, kind, tcp, ctx)

    def _transfer(self, req: Request, kind: str, tcp: bool, ctx: Signer | None):
        def fail(rcode: int, result: str):
            self._result(kind, result)
            reply = rcode_reply(req.data, rcode, req)
            return ctx.sign(reply) if ctx is not None else reply

        if req.qclass != vocab.CLASS_IN:
            yield fail(vocab.REFUSED, "class")
            return
        zone = self.zones.get(req.lname) or self.reverse_zones.get(req.lname)
        if zone is None:
            yield fail(NOTAUTH, "notauth")
            return
        if not self.table.synced:
            yield fail(vocab.SERVFAIL, "not_synced")
            return
        if kind == "axfr" and not tcp:
            yield fail(vocab.NOTIMP, "udp")
            return
        if kind == "ixfr":
            client_serial = ixfr_serial(req)
            if client_serial is None:
                yield fail(vocab.FORMERR, "formerr")
                return
            serial = self.table.soa_serial
            if self.leaving and (not tcp or client_serial == serial):
                yield fail(vocab.REFUSED, "leaving")
                return
            if not tcp or client_serial == serial:
                self._result(kind, "current" if client_serial == serial else "udp_soa")
                yield dress(soa_message(self.table, zone), req, ctx)
                return
            if req.lname in self.reverse_zones:
                diff: Any = "reverse_zone"  # no journal of a reverse zone's changes
            else:
                diff = self.journal.since(client_serial, serial) if self.journal is not None else "unknown"
            if isinstance(diff, str):  # no history from that serial: the whole zone (RFC 1995 4), unless leaving
                if self.on_fallback is not None and not self.leaving:
                    self.on_fallback(diff)
            else:
                self._result(kind, "ixfr")
                yield self._incremental(req, ctx, zone, client_serial, *diff)
                return
        if self.leaving:
            yield fail(vocab.REFUSED, "leaving")
            return
        # The whole zone: packed (or its packing awaited) by serve_tcp, then dressed like this.
        yield Whole(req, ctx, kind, "axfr" if kind == "axfr" else "fallback_axfr")

    def _incremental(self, req: Request, ctx: Signer | None, zone: str, client_serial: int, deleted: list[Owned],
                     added: list[Owned]) -> Incremental:
        """The IXFR reply (RFC 1995 4): our SOA, then one condensed difference (the SOA at the client's
        serial, the records deleted, our SOA, the records added), then our SOA again."""
        soa = soa_record(self.table)
        rec = soa[1]
        old = (), rec._replace(data=(client_serial, rec.data[1]))  # type: ignore[index]
        return Incremental(req, ctx, zone, [soa, old, *deleted, soa, *added, soa])

    def _result(self, kind: str, result: str) -> None:
        if self.on_result is not None:
            self.on_result(kind, result)
        if result not in ("axfr", "fallback_axfr", "current", "udp_soa"):
            log.debug("%s request: %s", kind, result)


def dress(message: bytes, req: Request, ctx: Signer | None) -> bytes:
    """`message` with the request's ID, RD bit and question (its spelling and type) put in."""
    out = bytearray(message)
    U16.pack_into(out, 0, req.qid)
    U16.pack_into(out, 2, QR | AA | (req.flags & RD))
    if out[5]:  # the first message carries the question, the same length as the request's
        out[12 : req.qend] = req.data[12 : req.qend]
    return ctx.sign(bytes(out)) if ctx is not None else bytes(out)


@dataclass(slots=True)
class Whole:
    """`decide`'s word for "the whole zone goes here": serve_tcp packs it (awaiting) and writes it."""

    req: Request
    ctx: Signer | None
    kind: str
    result: str


@dataclass(slots=True)
class Incremental:
    """`decide`'s IXFR reply from the journal: its records, taken when decided (a later change does not
    reach them); serve_tcp packs them, yielding to the event loop as the whole zone's packing does."""

    req: Request
    ctx: Signer | None
    zone: str
    records: list[Owned]

    async def pack(self) -> list[bytes]:
        return await pack_all(self.zone, self.records)
