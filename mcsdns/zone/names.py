"""Query name -> what it asks for, exactly as CoreDNS's kubernetes plugin parses it.

Pure functions over lower-cased labels (contract section 2.1); no lookups.
The zone has already been stripped: `labels` are the labels left of it, in
query order (leftmost first).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    APEX = "apex"  # the zone itself
    APEX_LIKE = "apex-like"  # svc.Z, pod.Z: exist, hold nothing
    INVALID = "invalid"  # not a name the zone can hold: NXDOMAIN
    POD = "pod"  # below pod.Z: NXDOMAIN (pods disabled, decision 6)
    NAMESPACE = "namespace"  # <ns>.svc.Z
    SERVICE = "service"  # <svc>.<ns>.svc.Z and the forms below it


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed name. Empty strings mean "not given" (and act as wildcards for port/protocol)."""

    kind: Kind
    namespace: str = ""
    service: str = ""
    endpoint: str = ""
    cluster: str = ""
    port: str = ""
    protocol: str = ""


APEX = Request(Kind.APEX)
APEX_LIKE = Request(Kind.APEX_LIKE)
INVALID = Request(Kind.INVALID)
POD = Request(Kind.POD)


def _strip_underscore(label: str) -> str:
    return label[1:] if label.startswith("_") else label


def parse(labels: list[str] | tuple[str, ...]) -> Request:
    """CoreDNS `parseRequest` with multicluster=true (contract 2.1, steps 1-6)."""
    n = len(labels)
    if n == 0:
        return APEX
    if n == 1 and labels[0] in ("svc", "pod"):
        return APEX_LIKE
    last = labels[-1]
    if last == "pod":
        return POD
    if last != "svc":
        return INVALID
    namespace = labels[-2]
    if n == 2:
        return Request(Kind.NAMESPACE, namespace=namespace)
    service = labels[-3]
    if n == 3:
        return Request(Kind.SERVICE, namespace=namespace, service=service)
    if n == 4:
        # One label left of the service: a cluster-less endpoint query (never matches, see D17).
        return Request(Kind.SERVICE, namespace=namespace, service=service, endpoint=labels[0])
    if n == 5:
        left, right = labels[0], labels[1]
        if left.startswith("_") or right.startswith("_"):
            return Request(
                Kind.SERVICE,
                namespace=namespace,
                service=service,
                port=_strip_underscore(left),
                protocol=_strip_underscore(right),
            )
        return Request(Kind.SERVICE, namespace=namespace, service=service, endpoint=left, cluster=right)
    return INVALID
