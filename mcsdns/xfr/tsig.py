"""TSIG (RFC 8945): the --tsig-key-file's one key read and checked, requests verified, replies signed.

A signed request is verified in RFC 8945 5.2's order (`Signer.verify`): the key and algorithm
(BADKEY), the MAC (BADSIG), the time within its fudge (BADTIME); the replies to it are signed,
each chained to the one before (5.3.1). `sign_request` signs what mcsdns sends (NOTIFY).
"""

from __future__ import annotations

import base64
import binascii
import struct
import time
from pathlib import Path
from typing import Any

import dns.exception
import dns.name
import dns.rdataclass
import dns.rdtypes.ANY.TSIG
import dns.tsig

from ..zone.wire import U16
from .request import TSIG, Request, arcount, rcode_reply

NOTAUTH = 9
BADSIG, BADKEY, BADTIME = 16, 17, 18
FUDGE = 300  # seconds of clock difference a signed request may have (RFC 8945 10: 300 recommended)
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


class Signer:
    """TSIG for one request: its verification, then the signatures of the replies, chained (RFC 8945 5.3.1)."""

    def __init__(self, key: dns.tsig.Key | None, req: Request) -> None:
        self.key = key
        self.req = req
        self.ctx: Any = None
        self.request_mac: bytes = req.tsig.mac
        self.first = True

    def verify(self, now: float) -> int:
        """0 if the request's signature is good, else the TSIG error (BADKEY, BADSIG, BADTIME), in RFC 8945 5.2's order."""
        req, key = self.req, self.key
        if key is None or req.key_name != key.name or req.tsig.algorithm != key.algorithm:
            return BADKEY
        try:
            # MAC first (5.2.2), with the time check of dnspython passed by construction: ours follows (5.2.3).
            dns.tsig.validate(req.data, key, req.key_name, req.tsig, req.tsig.time_signed, None, req.tsig_start)
        except (dns.tsig.BadSignature, dns.exception.FormError, dns.tsig.PeerError):
            return BADSIG
        if abs(req.tsig.time_signed - int(now)) > req.tsig.fudge:
            return BADTIME
        return 0

    def sign(self, reply: bytes) -> bytes:
        """`reply` with its TSIG record appended; every further call chains to the previous MAC."""
        key = self.key
        assert key is not None
        rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, key.algorithm, 0, FUDGE, b"", self.req.qid, 0, b"")
        now = int(time.time())
        if self.first:
            tsig, self.ctx = dns.tsig.sign(reply, key, rdata, now, self.request_mac, None, True)
            self.first = False
        else:
            tsig, self.ctx = dns.tsig.sign(reply, key, rdata, now, None, self.ctx, True)
        return _append_tsig(reply, key.name, tsig)

    def error_reply(self, error: int, now: float) -> bytes:
        """NOTAUTH with the TSIG error: BADKEY/BADSIG unsigned (an empty MAC), BADTIME signed with our time."""
        req = self.req
        reply = rcode_reply(req.data, NOTAUTH, req)
        if error == BADTIME and self.key is not None:
            other = struct.pack(">HI", (int(now) >> 32) & 0xFFFF, int(now) & 0xFFFFFFFF)
            rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, req.tsig.algorithm, 0, req.tsig.fudge, b"",
                                              req.qid, BADTIME, other)
            # The signed time is the request's, so the client can verify it (RFC 8945 5.2.3).
            tsig, _ = dns.tsig.sign(reply, self.key, rdata, req.tsig.time_signed, self.request_mac, None, False)
            return _append_tsig(reply, self.key.name, tsig)
        rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, req.tsig.algorithm, req.tsig.time_signed,
                                          req.tsig.fudge, b"", req.qid, error, b"")
        return _append_tsig(reply, req.key_name, rdata)


def sign_request(message: bytes, key: dns.tsig.Key) -> tuple[bytes, bytes]:
    """`message` (a request we send: NOTIFY) signed with `key` at our time; and its MAC, to verify the reply."""
    rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, key.algorithm, 0, FUDGE, b"",
                                      (message[0] << 8) | message[1], 0, b"")
    tsig, _ = dns.tsig.sign(message, key, rdata, int(time.time()), None, None, False)
    return _append_tsig(message, key.name, tsig), tsig.mac


def _append_tsig(message: bytes, owner: dns.name.Name, rdata: Any) -> bytes:
    body = rdata.to_wire()
    record = owner.to_wire() + struct.pack(">HHIH", TSIG, dns.rdataclass.ANY, 0, len(body)) + body
    return message[:10] + U16.pack(arcount(message) + 1) + message[12:] + record


def _append_tsig(message: bytes, owner: dns.name.Name, rdata: Any) -> bytes:
    body = rdata.to_wire()
    record = owner.to_wire() + struct.pack(">HHIH", TSIG, dns.rdataclass.ANY, 0, len(body)) + body
    return message[:10] + U16.pack(arcount(message) + 1) + message[12:] + record
