"""The compiled answers of a plain ClusterSetIP service, written in one pass (Table.compile's fast path).

Most services are ClusterSetIP imports with a few IPs and a few ports, and an initial sync compiles
every one of them: through `compile.compile_service` (the entries, then an `Answer` per name and
type) and `wire.Renderer` (the records of each answer), that is most of a sync's CPU (~60 us a
service, ~0.6 s of a 10,000-import sync). Their answers have one fixed shape, so this module writes
the same bytes straight from the import: A/AAAA answers of the service's IPs, and SRV answers of the
distinct port numbers, the target spelled out, the IPs as glue pointing to it.

It decides nothing: `compile.py` owns what each name answers, and `wire.Renderer` how it is laid out.
`answers()` covers only the shape it can write exactly and returns None for anything else (a headless
import, no IPs or no ports, an unusual port name, many IPs or ports), which the table compiles the
general way. `tests/test_plain.py` holds it to the general path byte for byte on thousands of
generated services, and every other test that compiles a ClusterSetIP service runs through it.
"""

from __future__ import annotations

import re
from typing import Callable

from .compile import LOCAL_PRIORITY
from .objects import PROTOCOLS, ServiceImport
from .vocab import AAAA, CLASS_IN, NOERROR, SRV, A
from .wire import _QUESTION, AA, RR_FIXED, SRV_FIXED, Body, _address_record, encode_labels, pointer

# Beyond this many IPs or ports the general path compiles the service (the answers stay far from
# any size limit here, so no record is ever cut: see REPLY_RECORDS_MAX and MAX_TCP there).
MAX_IPS = 32
MAX_PORTS = 32
# Port names that make a `_name._protocol` label as they are (IANA service names, any case).
_PORT_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")

Negative = Callable[[int, int], Body]  # Table.negative: (rcode, zone_at) -> the shared NODATA/NXDOMAIN body


def answers(imp: ServiceImport, zones: tuple[bytes, ...], ttl: int, negative: Negative
            ) -> list[tuple[bytes, int, Body]] | None:
    """(name in wire form, lower case; question type; body) of every compiled question of `imp`, in
    the order Table.compile keeps them, or None when the import is not plain (the general path
    compiles it).

    `zones` are the table's zones in wire form; `negative` gives the shared NODATA body."""
    if imp.headless or not imp.ips or not imp.ports or len(imp.ips) > MAX_IPS or len(imp.ports) > MAX_PORTS:
        return None
    # The names (left of the zone, lower case) and the ports each one's entries hold, as
    # compile.service_names and compile.service_entries make them.
    groups: dict[tuple[str, str], list[int]] = {}
    for port in imp.ports:
        if port.port < 0:
            return None
        if port.name and port.protocol:  # a `_name._protocol` name (compile.service_names)
            if not (_PORT_NAME.match(port.name) and port.protocol.upper() in PROTOCOLS and len(port.name) < 63):
                return None
            groups.setdefault((port.name.lower(), port.protocol.lower()), []).append(port.port)
    if imp.name != imp.name.lower() or imp.namespace != imp.namespace.lower():
        return None  # (the converters let no such name through; the general path keeps its spelling)
    try:
        base = encode_labels((imp.name, imp.namespace, "svc"))  # also the SRV target
    except ValueError:
        return None
    names = [(base, [port.port for port in imp.ports])]
    names += [(encode_labels((f"_{name}", f"_{proto}")) + base, ports) for (name, proto), ports in sorted(groups.items())]
    v4: dict[str, bool] = {}  # the distinct IPs in order (dicts keep it), per family
    v6: dict[str, bool] = {}
    for ip in imp.ips:
        (v6 if ":" in ip and "." not in ip else v4)[ip] = True
    a_records = [_address_record(A, ttl, ip) for ip in v4]
    aaaa_records = [_address_record(AAAA, ttl, ip) for ip in v6]
    glue = [_address_record(AAAA if ip in v6 else A, ttl, ip) for ip in dict.fromkeys(imp.ips)]
    out: list[tuple[bytes, int, Body]] = []
    for rel, ports in names:
        weight = max(1, 100 // (len(imp.ips) * len(ports)))
        numbers = list(dict.fromkeys(ports))
        for qtype, records in ((A, a_records), (AAAA, aaaa_records), (SRV, None)):
            for zone in zones:
                lname = rel + zone
                zone_at = 12 + len(rel)
                if records is not None:
                    body = _addresses(records, zone_at) if records else negative(NOERROR, zone_at)
                else:
                    body = _srv(numbers, weight, base, zone, ttl, glue, 12 + len(lname) + 4, zone_at)
                out.append((lname, qtype, body))
    return out


def _addresses(records: list[bytes], zone_at: int) -> Body:
    """An A or AAAA answer: each record owned by the question name (a pointer to it)."""
    body = bytearray()
    ends = []
    for record in records:
        body += _QUESTION
        body += record
        ends.append(len(body))
    return Body(AA | NOERROR, len(records), 0, 0, bytes(body), tuple(ends), (), False, zone_at, 0)


def _srv(numbers: list[int], weight: int, spelled: bytes, zone: bytes, ttl: int, glue: list[bytes],
         at_body: int, zone_at: int) -> Body:
    """An SRV answer: one record per port number, the target spelled out (RFC 2782: never compressed),
    then the glue, its owner a pointer to the first target (as miekg/dns compresses it)."""
    fixed = RR_FIXED.pack(SRV, CLASS_IN, ttl, 6 + len(spelled) + len(zone))
    rdata = spelled + zone
    body = bytearray()
    ends = []
    slots = []
    for number in numbers:
        body += _QUESTION
        slots.append(len(body) + 16 + len(spelled))  # where the zone is spelled, to re-case per query
        body += fixed
        body += SRV_FIXED.pack(LOCAL_PRIORITY, weight, number)  # a ClusterSetIP entry is never remote
        body += rdata
        ends.append(len(body))
    owner = pointer(at_body + 2 + 16)  # the first record's target
    for record in glue:
        body += owner
        body += record
        ends.append(len(body))
    return Body(AA | NOERROR, len(numbers), 0, len(glue), bytes(body), tuple(ends), tuple(slots), False, zone_at, 0)
