"""Time Table.compile for the two large-service cases of docs/reliability.md (prints figures).

usage: python -m benchmarks.compile_cost [repeats]
"""
from __future__ import annotations

import logging
import sys
import time

from mcsdns.objects import convert
from mcsdns.store import Store
from mcsdns.table import Table, TableConfig

logging.disable(logging.WARNING)


def table_with(objs):
    store = Store()
    table = Table(TableConfig(("clusterset.local",), 5, None, ("127.0.0.1",)), store)
    store.apply(convert({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}))
    for o in objs:
        store.apply(convert(o))  # no listener: nothing compiled yet
    return table


def headless(endpoints=1000, ports=100):
    port_list = [{"name": f"p{i}", "protocol": "TCP", "port": 1000 + i} for i in range(ports)]
    return [
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": "h", "namespace": "ns"}, "spec": {"type": "Headless", "ports": port_list}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
         "metadata": {"name": "h-1", "namespace": "ns", "labels": {
             "multicluster.kubernetes.io/service-name": "h", "multicluster.kubernetes.io/source-cluster": "c1"}},
         "endpoints": [{"addresses": [f"10.{i // 250}.{i % 250}.1"]} for i in range(endpoints)], "ports": port_list},
    ]


def clustersetip(ports=1000):
    port_list = [{"name": f"p{i}", "protocol": "TCP", "port": 1 + i} for i in range(ports)]
    return [{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
             "metadata": {"name": "c", "namespace": "ns"},
             "spec": {"type": "ClusterSetIP", "ips": ["10.9.0.1"], "ports": port_list}}]


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
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
