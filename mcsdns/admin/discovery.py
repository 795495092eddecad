"""What is imported here, and why a name answers what it answers: /imports and /explain.

Two admin routes over the same objects and table the DNS answers
come from, never a second copy of the zone logic:

* `/imports`: one entry per ServiceImport in the store, with its clusters'
  ready/not-ready address counts (the store's slices), its status as the MCS
  controller wrote it (conditions, clusters: decision 14, never an answer's
  cause) and every name it answers. The names are the ones `compiler.service_names` makes for the
  service, kept when the table holds a compiled answer for them (the table
  compiles every such name except per-endpoint ones, which exist exactly when a
  ready address of a labelled slice makes them; those come from the same
  function). Plus the objects the sources rejected and why, and the sync state.
* `/explain?name=N&type=T`: the rcode and the records come from the real
  resolver: a query packet is built for the question, handed to
  `Resolver.handle` as a DNS transport would, and the reply decoded back, so
  they are always what a client gets. Only the one-sentence reason is worked
  out here, from the store: which import and slices an answer comes from, or
  what is missing or excluded.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
from dataclasses import dataclass
from typing import Callable, Iterable

import dnslib

from ..objects import LABEL_SOURCE_CLUSTER, EndpointSlice, Port, ServiceImport
from ..serve.resolve import Forward, Resolver
from ..zone import compiler, vocab
from ..zone.names import Kind, Request, parse
from ..zone.table import QTYPE_IN, Table
from ..zone.wire import encode_labels, split_labels
from .orphans import orphan_sentence
from .pathcheck import BadVia, PathCheck, parse_via
from .server import JSON, Response, Route

_TYPE_N = re.compile(r"^TYPE(\d{1,5})$")
YIELD_EVERY = 100  # imports listed between two turns of the event loop: a short stretch for the queries waiting
_NAME_CHARS = re.compile(r"^[A-Za-z0-9_*-]+$")  # what a label of a name worth explaining holds


@dataclass(frozen=True, slots=True)
class Rejection:
    """An object a source could not use, and why (its last good version, if any, still serves)."""

    kind: str
    namespace: str
    name: str
    reason: str


class BadQuestion(ValueError):
    """An /explain query parameter that is not a DNS name or type; the message says which and why."""


def parse_name(text: str) -> tuple[str, ...]:
    """`web.demo.svc.clusterset.local[.]` -> its labels, as asked (case kept); BadQuestion if not a name."""
    name = text.strip()
    if not name or name == ".":
        raise BadQuestion("name: give a DNS name, e.g. name=web.demo.svc.clusterset.local")
    labels = tuple(name[:-1].split(".") if name.endswith(".") else name.split("."))
    for label in labels:
        if not label:
            raise BadQuestion(f"name {name!r}: empty label")
        if len(label) > 63:
            raise BadQuestion(f"name {name!r}: label {label[:20]!r}... is longer than 63 bytes")
        if not _NAME_CHARS.match(label):
            raise BadQuestion(f"name {name!r}: label {label!r} has characters other than letters, digits, '-', '_', '*'")
    if sum(len(label) + 1 for label in labels) + 1 > 255:
        raise BadQuestion(f"name {name[:40]!r}...: longer than 255 bytes")
    return labels


def parse_type(text: str) -> int:
    """`A`, `srv`, `TYPE65` -> the type number; BadQuestion otherwise."""
    t = text.strip().upper()
    number = dnslib.QTYPE.reverse.get(t)
    if number is None:
        m = _TYPE_N.match(t)
        number = int(m.group(1)) if m and int(m.group(1)) <= 0xFFFF else None
    if number is None:
        raise BadQuestion(f"type {text!r} is not a DNS type (A, AAAA, SRV, TXT, PTR, ... or TYPEn)")
    return number


def type_name(number: int) -> str:
    return str(dnslib.QTYPE.get(number, f"TYPE{number}"))


def query_packet(labels: tuple[str, ...], qtype: int, qid: int = 0x4D43) -> bytes:
    """A DNS query for (labels, qtype, IN) with RD set, as a stub resolver sends it."""
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_labels(labels) + b"\0" + struct.pack(">HH", qtype, 1)


def zone_line(rr: dnslib.RR) -> str:
    """`owner ttl IN TYPE rdata`, single-spaced."""
    return f"{rr.rname} {rr.ttl} IN {type_name(rr.rtype)} {rr.rdata.toZone()}".rstrip()


def _json(status: int, doc: dict) -> Response:
    return status, JSON, (json.dumps(doc, indent=2) + "\n").encode()


def _fqdn(labels: Iterable[str], zone_name: str) -> str:
    return ".".join((*labels, zone_name)) + "."


def _port_text(p: Port) -> str:
    if p.port == -1:
        return "(no ports)"
    return f"{p.name or '(unnamed)'}/{p.protocol or '(no protocol)'} {p.port}"


def status_json(imp: ServiceImport) -> dict:
    """An import's status as kept (decision 14): its conditions, the clusters it names, what was cut."""
    st = imp.status
    return {
        "conditions": [c._asdict() for c in st.conditions],
        "clusters": list(st.clusters),
        "cluster_count": st.cluster_count,
        "notes": list(st.notes),
    }


def status_sentence(imp: ServiceImport) -> str:
    """What the import's status says, for /explain: '' when Ready or silent. Never why DNS answers what it does."""
    out = ""
    not_ready = imp.status.not_ready()
    if not_ready is not None:
        out = (f"; the import is not Ready ({not_ready}): its status.conditions, written by the MCS controller; "
               "answers never depend on them (decision 14)")
    if imp.status.notes:
        out += f"; its status is shown in part ({'; '.join(imp.status.notes)})"
    return out


DISCOVERY_OFF = "discovery is off on this server (--discovery=off): /imports and /explain are not served"


def _discovery_off(_params: dict[str, list[str]]) -> Response:
    return _json(404, {"error": DISCOVERY_OFF})


class Discovery:
    """The /imports and /explain routes of one app."""

    def __init__(
        self,
        table: Table,
        resolver: Resolver,
        rejections: Callable[[], Iterable[Rejection]],
        readiness: Callable[[], tuple[bool, str]],
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled  # --discovery: off keeps the import list off an admin port others can reach
        self.table = table
        self.store = table.store
        self.resolver = resolver
        self.rejections = rejections
        self.readiness = readiness
        self.pathcheck = PathCheck()

    def routes(self) -> dict[str, Route]:
        """The two routes; with discovery off, each answers 404 saying so (not the admin's bare
        `not found`, so `mcsdns imports` can tell the operator why)."""
        if not self.enabled:
            return {"/imports": _discovery_off, "/explain": _discovery_off}
        return {"/imports": self._imports_route, "/explain": self._explain_route}

    # ----------------------------------------------------------------- /imports

    def entry(self, key: tuple[str, str]) -> dict | None:
        """The /imports entry of one ServiceImport (None: it is gone)."""
        imp = self.store.imports.get(key)
        if imp is None:
            return None
        clusters: dict[str, dict[str, int]] = {}
        for sl in sorted(self.store.service_slices(key), key=lambda s: (s.cluster or "", s.name)):
            counts = clusters.setdefault(sl.cluster or "", {"ready": 0, "not_ready": 0})
            counts["ready"] += len(sl.addresses)
            counts["not_ready"] += len(sl.not_ready)
        return {
            "namespace": imp.namespace,
            "name": imp.name,
            "type": "Headless" if imp.headless else "ClusterSetIP",
            "ips": list(imp.ips),
            "ports": [{"name": p.name, "protocol": p.protocol, "port": p.port} for p in imp.ports],
            "clusters": clusters,
            "names": self.names(key),
            "not_ready": imp.status.not_ready(),
            "status": status_json(imp),
        }

    async def imports_json(self, namespace: str | None = None) -> bytes:
        """The /imports document, one import per line; the loop answers DNS between chunks of imports.

        Listing a large cluster set's imports takes long enough that, in one go, it would hold every
        query back for the whole of it. Imports removed while the list is built are left out; each entry is
        consistent in itself, the list as a whole may straddle a change (as a paged API list does).
        """
        synced = self.table.synced
        keys = sorted(k for k in self.store.imports if namespace is None or k[0] == namespace)
        lines = []
        for i, key in enumerate(keys):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            entry = self.entry(key)
            if entry is not None:
                lines.append(json.dumps(entry))
        rejected = sorted(self.rejections(), key=lambda r: (r.kind, r.namespace, r.name))
        rejected_json = [json.dumps({"kind": r.kind, "namespace": r.namespace, "name": r.name, "reason": r.reason})
                         for r in rejected if namespace is None or r.namespace == namespace]  # fmt: skip
        # Not synced: why (the source's own words, as /ready gives them), so `mcsdns imports` can say it.
        waiting = "" if synced else f'"not_synced": {json.dumps(self.readiness()[1])},\n'
        return (
            f'{{"synced": {json.dumps(synced)},\n{waiting}"imports": [\n' + ",\n".join(lines) + '\n],\n"rejected": [\n'
            + ",\n".join(rejected_json) + "\n]}\n"
        ).encode()

    def names(self, key: tuple[str, str]) -> list[str]:
        """Every name the service answers (fully qualified, each zone), from the compiled table."""
        self.table.catch_up_service(key)  # right after the sync: compiled now if it was not yet
        svc = self.table.service(*key)
        if svc is None or not self.table.namespace_exposed(key[0]):
            return []
        answers = self.table.answers
        out = []
        for labels in compiler.service_names(svc):
            rel = encode_labels(labels)
            endpoint = bool(parse(labels).endpoint)  # compiled on first query: exists iff service_names made it
            for zwire in self.table.zones:
                zname = ".".join(split_labels(zwire))
                if endpoint or any(rel + zwire + QTYPE_IN[t] in answers for t in compiler.COMPILED_TYPES):
                    out.append(_fqdn(labels, zname))
        return out

    async def _imports_route(self, params: dict[str, list[str]]) -> Response:
        namespace = (params.get("namespace") or [None])[0] or None
        return 200, JSON, await self.imports_json(namespace)

    # ----------------------------------------------------------------- /explain

    def explain(self, name: str, qtype_text: str = "A") -> dict:
        return self._explain(name, qtype_text)[0]

    def _explain(self, name: str, qtype_text: str) -> tuple[dict, dnslib.DNSRecord | None]:
        """The /explain document, and mcsdns's reply (None: outside the zones) for the `via` check."""
        labels = parse_name(name)
        qtype = parse_type(qtype_text)
        reply = self.resolver.handle(query_packet(labels, qtype), tcp=True)
        fqdn = ".".join(labels) + "."
        tname = type_name(qtype)
        lowered = tuple(label.lower() for label in labels)
        outside = self.table.zone_of(encode_labels(lowered) + b"\0") is None
        if isinstance(reply, Forward) or reply is None:  # None: never for a well-formed query
            return {"name": fqdn, "type": tname, "rcode": None, "answer": [], "additional": [],
                    "reason": self._outside(fqdn, "it is forwarded to the upstream nameservers (--upstream)")
                    + self._meant(lowered)}, None  # fmt: skip
        msg = dnslib.DNSRecord.parse(reply)
        rcode = dnslib.RCODE.get(msg.header.rcode, str(msg.header.rcode))
        answer = [zone_line(rr) for rr in msg.rr]
        if outside:
            reason = self._outside(fqdn, "forwarding is off (--upstream none), so it is refused") + self._meant(lowered)
        else:
            reason = self.reason(lowered, qtype, rcode, len(answer))
        return {
            "name": fqdn,
            "type": tname,
            "rcode": rcode,
            "answer": answer,
            "additional": [zone_line(rr) for rr in msg.ar if rr.rtype != 41],
            "reason": reason,
        }, None if outside else msg

    async def explain_via(self, name: str, qtype_text: str = "A", via_text: str = "") -> dict:
        """explain(), plus (with `via`) what the DNS pods use answers and whether it reaches mcsdns (pathcheck.py)."""
        doc, msg = self._explain(name, qtype_text)
        via = parse_via(via_text)
        qtype = parse_type(qtype_text)
        if via is not None and msg is not None and qtype not in (vocab.AXFR, vocab.IXFR):
            labels = parse_name(name)
            zone_name = self.zone_name(tuple(label.lower() for label in labels))
            apex = self.resolver.handle(query_packet(tuple(zone_name.split(".")), vocab.SOA), tcp=True)
            zone_soa = dnslib.DNSRecord.parse(apex) if isinstance(apex, bytes) else None
            doc["via"] = await self.pathcheck.check(via, query_packet(labels, qtype), msg, zone_name, zone_soa)
        return doc

    def _outside(self, fqdn: str, what: str) -> str:
        return f"{fqdn} is outside the zones served here ({', '.join(self.table.config.zones)}): {what}"

    def _meant(self, lowered: tuple[str, ...]) -> str:
        """For `<svc>.<ns>` that is an import here: the full name, and why the short one is not it."""
        if len(lowered) != 2 or (lowered[1], lowered[0]) not in self.store.imports:
            return ""
        zone_name = self.table.config.zones[0]
        return (f". {lowered[0]}.{lowered[1]} is imported here: ask {'.'.join(lowered)}.svc.{zone_name}. (a pod's "
                f"resolver completes the short name only with svc.{zone_name} in its search list)")

    async def _explain_route(self, params: dict[str, list[str]]) -> Response:
        names = params.get("name") or [""]
        types = params.get("type") or ["A"]
        vias = params.get("via") or [""]
        if len(names) > 1 or len(types) > 1 or len(vias) > 1:
            return _json(400, {"error": "give one name, at most one type and at most one via"})
        try:
            return _json(200, await self.explain_via(names[0], types[0], vias[0]))
        except (BadQuestion, BadVia) as exc:
            return _json(400, {"error": str(exc)})

    # ----------------------------------------------------------------- the reason

    def zone_name(self, lowered: tuple[str, ...]) -> str:
        """The served zone (longest match) the lower-cased name is in."""
        zones = self.table.config.zones
        return next((z for z in sorted(zones, key=len, reverse=True)
                     if lowered[-len(z.split(".")):] == tuple(z.split("."))), zones[0])  # fmt: skip

    def reason(self, lowered: tuple[str, ...], qtype: int, rcode: str, answers: int) -> str:
        """One sentence on why (lowered labels, qtype) got `rcode` with `answers` records."""
        table = self.table
        zname = self.zone_name(lowered)
        labels = lowered[: len(lowered) - len(zname.split("."))]
        tname = type_name(qtype)
        if rcode == "SERVFAIL" and not table.synced:
            return (f"not synced yet ({self.readiness()[1]}): until every watched resource has been listed, "
                    "a name that does not exist answers SERVFAIL instead of NXDOMAIN")  # fmt: skip
        if rcode == "REFUSED":
            return "zone transfers (AXFR/IXFR) are refused, as by CoreDNS without its transfer plugin (decision 8)"
        special = self._special(labels, zname, qtype, tname, rcode)
        if special is not None:
            return special
        req = parse(labels)
        if req.kind is Kind.APEX_LIKE:
            return f"{_fqdn(labels, zname)} exists (CoreDNS's svc/pod subtrees) but holds no records of its own"
        if req.kind is Kind.POD:
            return "pod records are not served (CoreDNS's `pods disabled`, its default): every name below pod.<zone> is NXDOMAIN"
        if req.kind is Kind.INVALID:
            return (f"not a name this zone holds: names are <svc>.<ns>.svc.{zname}, _<port>._<proto>.<svc>.<ns>.svc.{zname} "
                    f"and <host>.<cluster>.<svc>.<ns>.svc.{zname}")  # fmt: skip
        missing = self._namespace_problem(req.namespace)
        if missing is not None:
            return missing
        if req.kind is Kind.NAMESPACE:
            count = sum(1 for k in self.store.imports if k[0] == req.namespace)
            return (f"namespace {req.namespace} exists ({count} ServiceImport(s) in it), but a namespace name holds "
                    "no records of its own")  # fmt: skip
        text = self._service_reason(req, qtype, tname, rcode, answers)
        if qtype == vocab.TXT:
            text += " (TXT: CoreDNS answers NODATA where the name has addresses, NXDOMAIN elsewhere)"
        return text

    def _special(self, labels: tuple[str, ...], zname: str, qtype: int, tname: str, rcode: str) -> str | None:
        if self.table.dnssd is not None:
            text = self.table.dnssd.explain(labels)
            if text is not None:
                return text
        elif rcode == "NXDOMAIN" and ("_dns-sd" in labels or len(labels) >= 4 and labels[-1] == "svc" and labels[-3][:1] == "_"):
            return "a DNS-SD browsing name: answered only with --dns-sd (off here, so NXDOMAIN, as CoreDNS answers)"
        if labels == ("dns-version",):
            if qtype == vocab.TXT:
                return f"the MCS DNS schema version CoreDNS answers ({compiler.DNS_SCHEMA_VERSION})"
            return "dns-version.<zone> holds only a TXT record (the schema version); CoreDNS answers NXDOMAIN for other types"
        if labels == ():
            if qtype in (vocab.SOA, vocab.NS):
                return f"the zone's own {tname} record (ns.dns.{zname} is this server)"
            return "the zone apex holds only its SOA and NS records"
        if labels == compiler.NS_NAME:
            addrs = ", ".join(self.table.config.ns_addresses) or "none"
            return f"this server's own name: its advertised addresses ({addrs}: --ns-address, else POD_IP(S), else the listen address)"
        return None

    def _namespace_problem(self, namespace: str) -> str | None:
        if namespace not in self.store.namespaces:
            return (f"no namespace {namespace}: no Namespace object of that name (with manifests: no object lives in it), "
                    "so every name below it is NXDOMAIN")  # fmt: skip
        allowed = self.table.config.namespaces
        if allowed is not None and namespace not in allowed:
            return f"namespace {namespace} is not served: --namespaces lists only {', '.join(sorted(allowed))}"
        return None

    def _rejected(self, kind: str, namespace: str, name: str) -> Rejection | None:
        return next((r for r in self.rejections() if r.kind == kind and r.namespace == namespace and r.name == name), None)

    def _service_reason(self, req: Request, qtype: int, tname: str, rcode: str, answers: int) -> str:
        ns, name = req.namespace, req.service
        imp = self.store.imports.get((ns, name))
        rejected = self._rejected("ServiceImport", ns, name)
        slices = self.store.service_slices((ns, name))
        if imp is None:
            if rejected is not None:
                return f"ServiceImport {ns}/{name} was rejected: {rejected.reason}"
            if slices:
                return orphan_sentence(ns, name, [sl.name for sl in slices])
            return f"no ServiceImport {name} in namespace {ns}"
        text = self._import_reason(imp, slices, req, qtype, tname, rcode, answers)
        if rejected is not None:
            text += f"; its latest version was rejected ({rejected.reason}), the last good one is served"
        return text + status_sentence(imp)

    def _import_reason(self, imp: ServiceImport, slices: tuple[EndpointSlice, ...], req: Request, qtype: int, tname: str,
                       rcode: str, answers: int) -> str:  # fmt: skip
        ref = f"ServiceImport {imp.namespace}/{imp.name}"
        if req.endpoint and not req.cluster:
            return (f"a per-endpoint name needs its cluster: <host>.<cluster>.{imp.name}.{imp.namespace}.svc.<zone> "
                    "(CoreDNS never matches <host>.<svc> alone)")  # fmt: skip
        if req.endpoint:
            return self._endpoint_reason(imp, slices, req, tname, rcode, answers)
        port_text = ""
        if req.port or req.protocol:
            ports = self._ports(imp, slices)
            matching = [p for p in ports if (not req.port or p.name.lower() == req.port)
                        and (not req.protocol or p.protocol.lower() == req.protocol)]  # fmt: skip
            if not matching:
                listed = ", ".join(sorted({_port_text(p) for p in ports})) or "none"
                return f"{ref} has no port named {req.port or '*'} with protocol {req.protocol or '*'} (its ports: {listed})"
            port_text = ", port " + ", ".join(sorted({_port_text(p) for p in matching}))
        if not imp.headless:
            if rcode == "NXDOMAIN":
                return f"{ref} (ClusterSetIP) has no ports: CoreDNS makes no names for a ClusterSetIP import without ports"
            if imp.ips:
                if answers:
                    return f"from {ref} (ClusterSetIP): its spec.ips {', '.join(imp.ips)}{port_text}"
                return self._nodata(ref, qtype, tname, f"spec.ips are {', '.join(imp.ips)}")
            ready = [sl for sl in slices if sl.addresses]
            used = ", ".join(f"{sl.name} ({sl.cluster or 'no cluster label'})" for sl in ready)
            if self.table.config.ips_from_slices:
                if answers:
                    return (f"from {ref} (ClusterSetIP): its spec.ips are empty, so (--ips-from-slices) the ready "
                            f"addresses of EndpointSlice(s) {used}{port_text}")  # fmt: skip
                return self._nodata(ref, qtype, tname, "spec.ips are empty and (--ips-from-slices) no EndpointSlice "
                                    "of it has a ready address of that family")  # fmt: skip
            hint = (f"; its EndpointSlice(s) {used} have ready addresses, which --ips-from-slices would answer"
                    if ready and qtype in (vocab.A, vocab.AAAA) else "")  # fmt: skip
            return self._nodata(ref, qtype, tname, "spec.ips are empty") + hint
        ready = [sl for sl in slices if sl.addresses]
        if answers:
            used = ", ".join(f"{sl.name} ({sl.cluster or 'no cluster label'})" for sl in ready)
            return f"from {ref} (Headless): the ready endpoints of EndpointSlice(s) {used}{port_text}"
        if not slices:
            return (f"{ref} is Headless and no EndpointSlice in {imp.namespace} is labelled "
                    f"multicluster.kubernetes.io/service-name={imp.name}")  # fmt: skip
        if not ready:
            waiting = ", ".join(f"{sl.name}: {len(sl.not_ready)} not ready" for sl in slices)
            return f"the endpoints of {ref} (Headless) exist but none is ready ({waiting})"
        if qtype == vocab.SRV and all(sl.cluster is None for sl in ready):
            return (f"the ready endpoints of {ref} are in EndpointSlices without a {LABEL_SOURCE_CLUSTER} label: "
                    "they answer A/AAAA, but make no SRV records (decision 4)")  # fmt: skip
        if qtype == vocab.SRV and all(p.port == -1 for sl in ready for p in sl.ports):
            return f"the EndpointSlices of {ref} list no ports, so there is no SRV record"
        families = sorted({"IPv6" if a.v6 else "IPv4" for sl in ready for a in sl.addresses})
        return self._nodata(ref, qtype, tname, f"its ready endpoints are {'/'.join(families)}")

    def _nodata(self, ref: str, qtype: int, tname: str, detail: str) -> str:
        if qtype == vocab.A:
            return f"the name exists ({ref}) but has no IPv4 address: {detail}"
        if qtype == vocab.AAAA:
            return f"the name exists ({ref}) but has no IPv6 address: {detail}"
        return f"the name exists ({ref}) but holds no {tname} records: mcsdns answers A, AAAA and SRV for it, as CoreDNS"

    @staticmethod
    def _ports(imp: ServiceImport, slices: tuple[EndpointSlice, ...]) -> list[Port]:
        """The ports `_<port>._<proto>` names match: the import's (ClusterSetIP) or the slices' (Headless)."""
        if not imp.headless:
            return list(imp.ports)
        return [p for sl in slices if sl.addresses for p in sl.ports]

    def _endpoint_reason(self, imp: ServiceImport, slices: tuple[EndpointSlice, ...], req: Request, tname: str, rcode: str,
                         answers: int) -> str:  # fmt: skip
        host, cluster = req.endpoint, req.cluster
        from_cluster = [sl for sl in slices if sl.cluster is not None and sl.cluster.lower() == cluster]
        for sl in from_cluster:
            if any(a.hostname.lower() == host for a in sl.addresses):
                where = f"endpoint {host} of cluster {sl.cluster} in EndpointSlice {sl.namespace}/{sl.name}"
                if answers:
                    return f"from {where} (ServiceImport {imp.namespace}/{imp.name})"
                return f"{where} exists but has no {tname} record"
        for sl in from_cluster:
            if any(a.hostname.lower() == host for a in sl.not_ready):
                return f"endpoint {host} of cluster {sl.cluster} in EndpointSlice {sl.namespace}/{sl.name} exists but is not ready"
        for sl in slices:
            if sl.cluster is None and any(a.hostname.lower() == host for a in sl.addresses + sl.not_ready):
                return (f"endpoint {host} is in EndpointSlice {sl.namespace}/{sl.name}, which has no {LABEL_SOURCE_CLUSTER} "
                        "label: its endpoints make no per-endpoint names (decision 4)")  # fmt: skip
        if not from_cluster:
            known = sorted({sl.cluster for sl in slices if sl.cluster is not None})
            return (f"no EndpointSlice of ServiceImport {imp.namespace}/{imp.name} comes from cluster {cluster} "
                    f"(clusters: {', '.join(known) or 'none'})")  # fmt: skip
        hosts = sorted({a.hostname for sl in from_cluster for a in sl.addresses})
        shown = ", ".join(hosts[:10]) + (", ..." if len(hosts) > 10 else "")
        return f"no ready endpoint named {host} in cluster {cluster} (ready there: {shown or 'none'})"
