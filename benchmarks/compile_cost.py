"""Time Table.compile for the two large-service cases (benchmarks/results/HISTORY.md) and for a whole
table of the scale data set, the one-pass compile (zone/fastpath.py) on and off (prints figures).

usage: python -m benchmarks.compile_cost [repeats]
"""
from __future__ import annotations

import argparse
import logging
import time

from benchmarks.dataset import Spec
from benchmarks.dataset import objects as dataset_objects
from mcsdns.objects import convert
from testsupport.inprocess import build_table
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import

logging.disable(logging.WARNING)


def table_with(objs):
    # No listener: nothing compiled yet, the timed loop compiles.
    return build_table(objects=[namespace("ns"), *objs], compile_changes=False)


def headless(endpoints=1000, ports=100):
    port_list = [{"name": f"p{i}", "protocol": "TCP", "port": 1000 + i} for i in range(ports)]
    return [
        service_import("ns", "h", headless=True, ports=port_list),
        endpoint_slice("ns", "h-1", "h", "c1", [endpoint([f"10.{i // 250}.{i % 250}.1"], ready=None) for i in range(endpoints)],
                       ports=port_list),
    ]


def clustersetip(ports=1000):
    port_list = [{"name": f"p{i}", "protocol": "TCP", "port": 1 + i} for i in range(ports)]
    return [service_import("ns", "c", ["10.9.0.1"], ports=port_list)]


def main():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_cost", description=__doc__.splitlines()[0])
    parser.add_argument("repeats", nargs="?", type=int, default=3, help="compiles per case (the minimum is printed)")
    repeats = parser.parse_args().repeats
    if repeats < 1:
        parser.error("repeats must be at least 1")
    for label, objs, key in (
        ("headless: 1000 endpoints x 100 named ports", headless(), ("ns", "h")),
        ("ClusterSetIP: 1000 named ports", clustersetip(), ("ns", "c")),
    ):
        table = table_with(objs)
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            table.compile(key)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        answers = table.owned[key]
        print(f"{label}: compile wall min {min(times):.3f} s (max {max(times):.3f}), CPU min {min(cpu):.3f} s, "
              f"over {repeats}; {len(answers)} keys, {sum(len(table.answers[k].body) for k in answers)} body bytes")
    # The initial sync's compile: every service of the scale data set's 10,000 imports (ClusterSetIP
    # with one port, and the headless ones), as Table._compile_everything compiles them.
    spec = Spec(imports=10_000)
    objs = [convert(o) for o in dataset_objects(spec)]
    for fast in (True, False):
        table = build_table(objects=objs, compile_changes=False)
        table.use_fastpath = fast
        keys = list(table.store.imports)
        cpu = []
        for _ in range(repeats):
            c0 = time.process_time()
            for key in keys:
                table.compile(key)
            cpu.append(time.process_time() - c0)
        print(f"scale data set, {len(keys)} services, one-pass compile {'on' if fast else 'off'}: "
              f"CPU min {min(cpu):.3f} s over {repeats} ({min(cpu) / len(keys) * 1e6:.1f} us a service); "
              f"{len(table.answers)} keys")

if __name__ == "__main__":
    main()
