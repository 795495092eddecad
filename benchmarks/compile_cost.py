"""Time Table.compile for the two large-service cases of docs/reliability.md (prints figures).

usage: python -m benchmarks.compile_cost [repeats]
"""
from __future__ import annotations

import argparse
import logging
import time

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


if __name__ == "__main__":
    main()
