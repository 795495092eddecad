"""The differential suite: a real CoreDNS beside mcsdns against the same kube-apiserver.

See docs/compatibility.md for what is compared, the result, and the deliberate
differences (tests/compat/decisions.py holds the machine-readable list).
"""
