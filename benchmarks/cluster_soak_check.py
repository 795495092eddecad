"""The checker of benchmarks/cluster_soak.py: dig's output parsed, each answer judged against the
API state around it, failures grouped into windows and each window tied to the event before it.

Kept apart from the cluster code so that tests/test_cluster_soak_check.py runs it on canned dig
output without a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# docs/install.md: a change reaches a pod's answers once CoreDNS's `cache 5` entry expires, plus
# mcsdns's programming time (2 s).
PROPAGATION_WINDOW = 5.0 + 2.0
# Two failures closer than this belong to one window.
WINDOW_GAP = 5.0

Answer = tuple[str, frozenset[str]]  # (rcode, the A addresses or SRV targets)


@dataclass
class Query:
    sent: float
    received: float
    key: str  # the name form: web, db, srv, db-2, flip, nope
    proto: str  # udp or tcp
    answer: Answer | None  # None: no reply (lost)
    raw: str = ""


_STATUS = re.compile(r"status: ([A-Z]+)")


def parse_line(line: str) -> Query | None:
    """One line of the pod's loop: `Q SENT RECEIVED KEY PROTO dig-output-with-|-for-newlines`."""
    parts = line.rstrip("\n").split(" ", 5)
    if len(parts) < 5 or parts[0] != "Q":
        return None
    try:
        sent, received = float(parts[1]), float(parts[2])
    except ValueError:
        return None
    raw = parts[5] if len(parts) > 5 else ""
    status = _STATUS.search(raw)
    if not status:
        return Query(sent, received, parts[3], parts[4], None, raw)
    data = []
    for record in raw.split("|"):
        fields = record.split()
        if not fields or record.startswith(";") or len(fields) < 5:
            continue
        rtype = fields[3]
        if rtype == "A":
            data.append(fields[4])
        elif rtype == "SRV":
            data.append(fields[-1].rstrip(".").lower())
    return Query(sent, received, parts[3], parts[4], (status[1], frozenset(data)), raw)


@dataclass
class Timeline:
    """What the API held for each name form, as (written, expected) in order of writing.

    `written` is the moment the write was sent to the API (the answer may change from then on);
    a state counts as replaced when the next write returned (it may still be served until then
    plus the propagation window)."""

    versions: dict[str, list[tuple[float, float, Answer]]] = field(default_factory=dict)

    def set(self, key: str, sent: float, done: float, answer: Answer) -> None:
        self.versions.setdefault(key, []).append((sent, done, answer))

    def acceptable(self, key: str, sent: float, received: float,
                   window: float = PROPAGATION_WINDOW) -> list[Answer]:
        """Answers right for a query sent at `sent` and answered at `received`: every state
        written before the reply and not replaced before `sent - window`."""
        out = []
        history = self.versions.get(key, [])
        for i, (written, _done, answer) in enumerate(history):
            replaced = history[i + 1][1] if i + 1 < len(history) else float("inf")
            if written <= received and replaced >= sent - window:
                out.append(answer)
        return out


    def stale_by(self, key: str, sent: float, received: float, answer: Answer) -> float | None:
        """How long before `sent` the newest state with this answer, written before the reply, was
        replaced (None: no such state): a late answer's age, which the propagation window bounds."""
        history = self.versions.get(key, [])
        for i in range(len(history) - 1, -1, -1):
            if history[i][2] == answer and history[i][0] <= received:
                return sent - history[i + 1][1] if i + 1 < len(history) else 0.0
        return None


def age(query: Query, timeline: Timeline) -> float | None:
    """How long before the query was sent its answer had stopped being the API's state: 0 for an answer
    still current then, None for no answer or one the API never held before the reply. Within the
    propagation window an answer this old is right; the largest age on a path is how far it lags."""
    if query.answer is None:
        return None
    stale = timeline.stale_by(query.key, query.sent, query.received, query.answer)
    return None if stale is None else max(0.0, stale)


def judge(query: Query, timeline: Timeline) -> str:
    """ok, wrong or lost."""
    if query.answer is None:
        return "lost"
    return "ok" if query.answer in timeline.acceptable(query.key, query.sent, query.received) else "wrong"


@dataclass
class Window:
    start: float
    end: float
    failures: list[tuple[Query, str]]
    answered_inside: int = 0


def windows(judged: list[tuple[Query, str]], gap: float = WINDOW_GAP) -> list[Window]:
    """Failures (lost or wrong) grouped by send time; the queries answered right inside each counted."""
    out: list[Window] = []
    for query, verdict in sorted(judged, key=lambda qv: qv[0].sent):
        if verdict == "ok":
            continue
        if out and query.sent - out[-1].end <= gap:
            out[-1].end = max(out[-1].end, query.received)
            out[-1].failures.append((query, verdict))
        else:
            out.append(Window(query.sent, query.received, [(query, verdict)]))
    for win in out:
        win.answered_inside = sum(1 for q, v in judged if v == "ok" and win.start <= q.sent <= win.end)
    return out


def cause(window: Window, events: list[tuple[float, str]]) -> tuple[str, float] | None:
    """The last event started before the window, and how long before it the window began."""
    before = [(t, name) for t, name in events if t <= window.start]
    if not before:
        return None
    t, name = before[-1]
    return name, window.start - t
