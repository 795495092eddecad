"""Time decoding list pages of the benchmark data set into the store's records, in-process (prints figures).

Pages are built as the API server serves them (the data set's objects plus the metadata the
server adds: uid, resourceVersion, creationTimestamp, generation, managedFields) and each is
decoded and converted as `Watcher.list` does: JSON -> dicts -> `objects.convert`. Decoders are
alternated round by round and the best round kept, so a busy machine skews them alike. Only
relative figures are meaningful here; the sync times users see come from the scale benchmark.

usage: python -m benchmarks.decode_cost [imports] [rounds]
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Callable

from benchmarks.dataset import Spec, objects
from mcsdns.objects import convert
from mcsdns.sources import decode

PAGE = 500  # what the watch asks for (watching.PAGE_SIZE)


def served(obj: dict, n: int) -> dict:
    """`obj` with the metadata the API server adds to every stored object."""
    meta = dict(obj["metadata"])
    meta.update({
        "uid": f"0b9c{n:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "resourceVersion": str(1000 + n), "generation": 1,
        "creationTimestamp": "2026-12-01T23:40:05Z",
        "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": obj["apiVersion"],
                           "time": "2026-12-01T23:40:05Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {".": {}}}}],
    })  # fmt: skip
    out = {**obj, "metadata": meta}
    for k, ep in enumerate(out.get("endpoints") or ()):
        # What the EndpointSlice controller writes beside the address (none of it read by DNS).
        ep = out["endpoints"][k] = {**ep, "nodeName": f"node-{k % 50}", "zone": "zone-a",
                                    "targetRef": {"kind": "Pod", "name": f"pod-{n}-{k}", "namespace": meta["namespace"],
                                                  "uid": f"7d1e{n:08x}-{k:04x}-4e5f-8a9b-0c1d2e3f4a5b"}}
        ep["conditions"] = {"ready": True, "serving": True, "terminating": False}
    return out


def pages(imports: int, kind: str) -> list[bytes]:
    items = [served(o, n) for n, o in enumerate(objects(Spec(imports=imports))) if o["kind"] == kind]
    return [
        json.dumps({"apiVersion": "v1", "kind": kind + "List", "metadata": {"resourceVersion": "9"},
                    "items": items[i : i + PAGE]}).encode()
        for i in range(0, len(items), PAGE)
    ]  # fmt: skip


def run(load: Callable[[bytes], dict], data: list[bytes], conversion: bool) -> float:
    """CPU seconds to decode (and convert) every page; CPU, not wall: the machine may be shared."""
    t0 = time.process_time()
    for raw in data:
        items = load(raw)["items"]
        if conversion:
            for item in items:
                convert(item)
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_cost", description=__doc__.splitlines()[0])
    parser.add_argument("imports", nargs="?", type=int, default=10000, help="imports in the data set")
    parser.add_argument("rounds", nargs="?", type=int, default=5, help="rounds (the minimum is printed)")
    args = parser.parse_args()
    if args.imports < 1 or args.rounds < 1:
        parser.error("imports and rounds must be at least 1")
    imports, rounds = args.imports, args.rounds
    data = pages(imports, "ServiceImport") + pages(imports, "EndpointSlice")
    size = sum(map(len, data))
    decoders = {"json (stdlib)": json.loads, "msgspec, untyped (decode.loads)": decode.loads,
                "msgspec, DNS fields (decode.page)": decode.page}
    try:  # the alternative measured for the choice; not a dependency (big integers become floats)
        import orjson

        decoders["orjson (not used)"] = orjson.loads
    except ImportError:
        pass
    print(f"{imports} imports: {len(data)} pages, {size / 1e6:.1f} MB of JSON; CPU seconds, best of {rounds}, alternated")
    for conversion in (False, True):
        best = {name: float("inf") for name in decoders}
        for _ in range(rounds):
            for name, load in decoders.items():
                best[name] = min(best[name], run(load, data, conversion))
        base = best["json (stdlib)"]
        print("decode + objects.convert:" if conversion else "decode only:")
        for name, t in best.items():
            print(f"  {name:36} {t:.3f} s  (stdlib's time / this: {base / t:.2f}x)")


if __name__ == "__main__":
    main()
