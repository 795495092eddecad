"""Test support shared by tests/, benchmarks/ and the soak (never shipped: the wheel holds only `mcsdns`).

One place for what more than one of them needs, imported as a package from the repository root
(`python3 -m pytest`, `python -m benchmarks`, `python -m benchmarks.soak` all run from there; pytest's
`pythonpath` setting covers plain `pytest`):

- `testbed`: a real etcd + kube-apiserver, its client, and the process helpers (free ports, stopping).
- `mcsdnsserver`: the one way to run `mcsdns serve` on free loopback ports (`McsdnsServer`).
- `polling`: the one `eventually`.
- `framing`: DNS over TCP as bytes (the length prefix written and read) for tests that drive the stream.
- `objects`: the manifest builders (ServiceImport, EndpointSlice, Namespace dicts).
- `inprocess`: an in-process Store + Table (+ Resolver) for unit tests that need no socket, and its `ask`.
- `cases`: the DNS contract's cases (query and expected answer), asked by the zone, server and compat suites.
- `fuzz`: the packet and object fuzz engine; its long run is `python -m testsupport.fuzz`.
"""
