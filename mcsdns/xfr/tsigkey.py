"""The --tsig-key-file: one TSIG key (RFC 8945) read and checked, for config validation and transfer.py."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

import dns.exception
import dns.name
import dns.tsig

ALGORITHMS = ("hmac-sha1", "hmac-sha224", "hmac-sha256", "hmac-sha384", "hmac-sha512")


class KeyFileError(ValueError):
    """The --tsig-key-file cannot be used (the message says why)."""


def load_key(path: Path) -> dns.tsig.Key:
    """`name:algorithm:base64secret` from `path` (one line; `#` comments and blank lines skipped).

    `algorithm:name:secret`, the order `dig -y` and `kdig -y` take, is read too when the first
    field is an algorithm and the second is not. The secret must be base64 of at least 16 bytes.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror or exc}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if len(lines) != 1 or lines[0].count(":") != 2:
        raise KeyFileError(f"{path}: expected one line name:algorithm:base64secret")
    name, algorithm, secret = lines[0].split(":")
    if name.lower() in ALGORITHMS and algorithm.lower() not in ALGORITHMS:
        name, algorithm = algorithm, name
    algorithm = algorithm.lower()
    if algorithm not in ALGORITHMS:
        raise KeyFileError(f"{path}: algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    try:
        raw = base64.b64decode(secret, validate=True)
        key_name = dns.name.from_text(name)
    except (binascii.Error, ValueError, dns.exception.DNSException) as exc:
        raise KeyFileError(f"{path}: {exc}") from None
    if len(raw) < 16:
        raise KeyFileError(f"{path}: the secret is {len(raw)} bytes; use at least 16 (e.g. `openssl rand -base64 32`)")
    return dns.tsig.Key(key_name, raw, algorithm)
