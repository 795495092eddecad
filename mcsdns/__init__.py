"""mcsdns: a fast, CoreDNS-compatible DNS server for Kubernetes Multi-Cluster Services."""

__version__ = "0.1.0"
