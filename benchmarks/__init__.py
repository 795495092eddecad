"""Reproducible performance measurements of mcsdns against real peers.

One command runs everything and writes the report (see docs/performance.md):

    python -m benchmarks run

Peers are started by the suite on loopback with the same data, in the same
run: CoreDNS (kubernetes plugin, `multicluster`, fed by a real kube-apiserver
of the test bed), Knot DNS (a static zone with the same records) and mcsdns
(from manifests and from the same API). dnsperf is the load generator.
"""
