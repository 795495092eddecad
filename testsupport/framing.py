"""DNS over TCP as bytes (RFC 1035 4.2.2: a two-byte length before each message), for the tests that write
and read the stream themselves: pipelining, transfers, connection limits, shutdown."""

from __future__ import annotations

import socket
import struct

import dns.message


def frame(message: dns.message.Message | bytes) -> bytes:
    """`message` with its length prefix, ready to write to a TCP connection."""
    wire = message if isinstance(message, bytes) else message.to_wire()
    return struct.pack(">H", len(wire)) + wire


class FrameReader:
    """Whole messages off a connected socket, in order, keeping the bytes read past the last one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.count = 0  # messages returned so far

    def read(self) -> bytes | None:
        """The next message's bytes (no prefix); None when the peer closes before a whole one arrives."""
        while len(self.buffer) < 2 or len(self.buffer) < 2 + struct.unpack(">H", self.buffer[:2])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        size = struct.unpack(">H", self.buffer[:2])[0]
        message, self.buffer = self.buffer[2 : 2 + size], self.buffer[2 + size :]
        self.count += 1
        return message

    def expect(self) -> bytes:
        """The next message's bytes; the test fails if the peer closes first."""
        message = self.read()
        assert message is not None, f"connection closed after {self.count} messages"
        return message


def read_frames(sock: socket.socket, n: int, *, timeout: float | None = None,
                closed_ok: bool = False) -> list[dns.message.Message]:
    """The next `n` messages, parsed. A close before them fails the test, or with `closed_ok` ends the list
    early (a test counting what a limited connection got)."""
    if timeout is not None:
        sock.settimeout(timeout)
    reader = FrameReader(sock)
    out: list[dns.message.Message] = []
    while len(out) < n:
        wire = reader.read() if closed_ok else reader.expect()
        if wire is None:
            break
        out.append(dns.message.from_wire(wire))
    return out
