"""The compiled answers of a simple ClusterSetIP service, written in one pass (Table.compile's fast path).

Most services are ClusterSetIP imports with a few IPs and a few ports, and an initial sync compiles
every one of them: through `compiler.compile_service` (the entries, then an `Answer` per name and
type) and `wire.Renderer` (the records of each answer), that is most of a sync's CPU. Their answers
have one fixed shape, so this module writes the same bytes straight from the import: A/AAAA answers
of the service's IPs, and SRV answers of the distinct port numbers, the target spelled out, the IPs
as glue pointing to it.

It decides nothing: `compiler.py` owns what each name answers, and `wire.Renderer` how it is laid out.
`answers()` covers only the shape it can write exactly and returns None for anything else (a headless
import, no IPs or no ports, an unusual port name, many IPs or ports), which the table compiles the
general way. `tests/test_plain.py` holds it to the general path byte for byte on thousands of
generated services, and every other test that compiles a ClusterSetIP service runs through it.
"""

from __future__ import annotations

import re
from typing import Callable

from ..objects import PROTOCOLS, ServiceImport
from .compiler import LOCAL_PRIORITY
from .vocab import AAAA, CLASS_IN, NOERROR, SRV, A
from .wire import AA, QUESTION_POINTER, RR_FIXED, SRV_FIXED, Body, address_record, encode_labels, pointer, service_labels

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
    the order Table.compile keeps them, or None when the import is not of that shape (the general path
    compiles it).

    `zones` are the table's zones in wire form; `negative` gives the shared NODATA body."""
    ips, ports = imp.ips, imp.ports
    if imp.headless or not ips or not ports or len(ips) > MAX_IPS or len(ports) > MAX_PORTS:
        return None
    # The names (left of the zone, lower case) and the ports each one's entries hold, as
    # compiler.service_names and compiler.service_entries make them.
    # Keyed by ((name, protocol) lower case, its wire prefix): the pair sorts as names do, and one
    # pair has one prefix, so the prefix never decides the order.
    groups: dict[tuple[tuple[str, str], bytes], list[int]] = {}
    for port in ports:
        if port.port < 0:
            return None
        if port.name and port.protocol:  # a `_name._protocol` name (compiler.service_names)
            labels = _port_labels(port.name, port.protocol)
            if labels is None:
                return None
            groups.setdefault(labels, []).append(port.port)
    base = _service_labels(imp.name, imp.namespace)  # also the SRV target
    if base is None:
        return None
    names = [(base, [port.port for port in ports])]
    names += [(prefix + base, numbers) for (_, prefix), numbers in sorted(groups.items())]
    # Each distinct IP's record, in order (dicts keep it), per family; the glue holds them all.
    v4: dict[str, bytes] = {}
    v6: dict[str, bytes] = {}
    for ip in ips:
        if ":" in ip and "." not in ip:
            if ip not in v6:
                v6[ip] = address_record(AAAA, ttl, ip)
        elif ip not in v4:
            v4[ip] = address_record(A, ttl, ip)
    if v4 and v6:
        glue = [v4[ip] if ip in v4 else v6[ip] for ip in dict.fromkeys(ips)]
    else:
        glue = list((v4 or v6).values())
    # An A/AAAA answer's bytes do not depend on the name (its records point at the question): laid
    # out once per family, a Body per name for where its zone sits.
    families = ((A, _addresses(list(v4.values())) if v4 else None),
                (AAAA, _addresses(list(v6.values())) if v6 else None))
    count = len(ips)
    out: list[tuple[bytes, int, Body]] = []
    for rel, numbers in names:
        zone_at = 12 + len(rel)
        for qtype, laid in families:
            for zone in zones:
                body = _address_body(laid, zone_at) if laid is not None else negative(NOERROR, zone_at)
                out.append((rel + zone, qtype, body))
        weight = max(1, 100 // (count * len(numbers)))
        distinct = list(dict.fromkeys(numbers))
        for zone in zones:
            lname = rel + zone
            out.append((lname, SRV, _srv(distinct, weight, base, zone, ttl, glue, 12 + len(lname) + 4, zone_at)))
    return out


# `_name._protocol` labels by (port name, protocol) as the import spells them, None for a pair that
# makes no such name here. A sync asks for the same few again and again; emptied past the bound.
_PORT_PREFIXES: dict[tuple[str, str], tuple[tuple[str, str], bytes] | None] = {}
_CACHE_MAX = 4096


def _port_labels(name: str, protocol: str) -> tuple[tuple[str, str], bytes] | None:
    """((port name, protocol) in lower case, as names sort; `_name._protocol` in wire form), or None."""
    spelled = (name, protocol)
    try:
        return _PORT_PREFIXES[spelled]
    except KeyError:
        pass
    labels = None
    if _PORT_NAME.match(name) and protocol.upper() in PROTOCOLS and len(name) < 63:
        key = (name.lower(), protocol.lower())
        labels = key, encode_labels((f"_{key[0]}", f"_{key[1]}"))
    if len(_PORT_PREFIXES) >= _CACHE_MAX:
        _PORT_PREFIXES.clear()
    _PORT_PREFIXES[spelled] = labels
    return labels


def _service_labels(name: str, namespace: str) -> bytes | None:
    """`<name>.<namespace>.svc` in wire form, or None: a label in upper case (the converters let no
    such name through; the general path keeps its spelling) or one that is no DNS label."""
    if name != name.lower() or namespace != namespace.lower():
        return None
    try:
        return service_labels(name, namespace)
    except ValueError:
        return None


def _addresses(records: list[bytes]) -> tuple[int, bytes, tuple[int, ...]]:
    """An A or AAAA answer's records, each owned by the question name (a pointer to it): (count,
    bytes, record ends)."""
    body = bytearray()
    ends = []
    for record in records:
        body += QUESTION_POINTER
        body += record
        ends.append(len(body))
    return len(records), bytes(body), tuple(ends)


def _address_body(answer: tuple[int, bytes, tuple[int, ...]], zone_at: int) -> Body:
    return Body(AA | NOERROR, answer[0], 0, 0, answer[1], answer[2], (), False, zone_at, 0)


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
        body += QUESTION_POINTER
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
