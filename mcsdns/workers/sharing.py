"""--workers N: lay the compiled table out for sharing, before the supervisor forks its workers.

A forked worker shares the supervisor's memory copy-on-write, but CPython writes
to every object it reads (the reference count sits in the object), so a page is
copied into a worker as soon as a query touches one object on it. What a
compiled answer's query touches is its lookup key (the dict compares it), its
`Body`, the body's bytes and its flags; what sits on the same pages decides how
much a worker copies. After a compile those objects are scattered among
everything else the compile allocated (the store's objects, the other types'
answers, freed temporaries), so answering every service name once copies most
of the table.

`compact` reallocates exactly those objects, grouped by question type with the
address types first (what clients ask, search-path expansions aside, is A and
AAAA of service names), so a worker copies the pages of what it is asked and not
the rest. It runs once, in the supervisor, right before the first fork: doing
it again later would give the supervisor fresh copies of pages the workers
still share. Answers stay byte for byte the same (same bodies, same keys).
"""

from __future__ import annotations

from ..zone import vocab
from ..zone.schedule import collector_paused
from ..zone.table import Table
from ..zone.wire import Body

# Question types in layout order; every other type follows them.
_FIRST = (vocab.A, vocab.AAAA)


def _rank(key: bytes) -> int:
    qtype = (key[-4] << 8) | key[-3]
    return _FIRST.index(qtype) if qtype in _FIRST else len(_FIRST)


def _fresh(data: bytes) -> bytes:
    """A new bytes object equal to `data` (bytes(data) and data[:] return `data` itself)."""
    return bytes(memoryview(data)) if data else data


@collector_paused  # hundreds of thousands of allocations, no cycles: nothing for the collector to find
def compact(table: Table) -> None:
    """Rebuild `table.answers` (and `table.owned`, which names the same keys) from new objects laid out
    by question type; bodies shared between keys stay shared, equal flags become one int."""
    flags: dict[int, int] = {}
    bodies: dict[int, Body] = {}
    keys: dict[bytes, bytes] = {}
    answers: dict[bytes, Body] = {}
    old = table.answers
    for key in sorted(old, key=_rank):
        body = old[key]
        new = bodies.get(id(body))
        if new is None:
            flag = flags.setdefault(body.flags, body.flags)
            new = bodies[id(body)] = Body(flag, body.an, body.ns, body.ar, _fresh(body.body), body.ends,
                                          body.zone_slots, body.soa, body.zone_at, body.split)
        fresh = keys[key] = _fresh(key)
        answers[fresh] = new
    table.owned = {service: [keys.get(k, k) for k in owned] for service, owned in table.owned.items()}
    table.answers = answers
    del old, bodies, keys
