"""Many questions to one server, fast: a window of UDP queries on one socket, and
TCP queries pipelined in chunks over a few connections.

Replies are raw wire bytes (None when the server never answered), matched to
questions by message ID; the caller parses and compares them. The questions'
names are sent exactly as given, so a random-case spelling reaches both servers
byte for byte.
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype

UDP, UDP_EDNS, TCP = "udp", "udp+edns", "tcp"
TRANSPORTS = (UDP, UDP_EDNS, TCP)

# A server: a port on 127.0.0.1, or (address, port) for one elsewhere (a pod of the one-node cluster).
Server = int | tuple[str, int]


def address(server: Server) -> tuple[str, int]:
    return ("127.0.0.1", server) if isinstance(server, int) else server


@dataclass(frozen=True)
class Ask:
    """One question as sent: name spelling, type, transport, EDNS payload size (0: no EDNS),
    the DO bit and EDNS options (code, data)."""

    qname: str
    qtype: str
    transport: str
    payload: int = 0  # EDNS UDP payload size; 0 = no OPT record
    do: bool = False
    options: tuple[tuple[int, bytes], ...] = ()

    def wire(self, qid: int) -> bytes:
        q = dns.message.make_query(dns.name.from_text(self.qname), dns.rdatatype.from_text(self.qtype),
                                   dns.rdataclass.IN, use_edns=0 if self.payload else False,
                                   payload=self.payload or 1232, want_dnssec=self.do,
                                   options=[dns.edns.GenericOption(code, data) for code, data in self.options])
        q.id = qid
        q.flags = dns.flags.RD
        return q.to_wire()

    def describe(self) -> str:
        edns = ""
        if self.payload:
            edns = f" (EDNS {self.payload}{' DO' if self.do else ''}"
            edns += "".join(f" opt{code}={data.hex()}" for code, data in self.options) + ")"
        return f"{self.qname} {self.qtype} over {self.transport}{edns}"


def exchange(port: Server, asks: list[Ask], *, timeout: float = 1.0, retries: int = 1,
             window: int = 64, tcp_chunk: int = 40, tcp_connections: int = 4) -> list[bytes | None]:
    """Send every question to 127.0.0.1:port (or to (address, port)); the i-th reply (or None) for
    the i-th question.

    A question the server never answers costs `timeout` x (1 + `retries`) over UDP and
    `timeout` after the last reply on its TCP connection (CoreDNS stays silent when it
    cannot pack a reply, e.g. a name with an empty label).
    """
    replies: list[bytes | None] = [None] * len(asks)
    udp = [i for i, a in enumerate(asks) if a.transport != TCP]
    tcp = [i for i, a in enumerate(asks) if a.transport == TCP]
    chunks = [tcp[start : start + tcp_chunk] for start in range(0, len(tcp), tcp_chunk)]
    with ThreadPoolExecutor(tcp_connections) as pool:
        done = [pool.submit(_tcp, port, asks, chunk, replies, timeout) for chunk in chunks]
        if udp:
            _udp(port, asks, udp, replies, timeout, retries, window)
        for f in done:
            f.result()
    return replies


def _udp(port: Server, asks: list[Ask], todo: list[int], replies: list[bytes | None], timeout: float,
         retries: int, window: int) -> None:
    rng = random.Random(address(port)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.connect(address(port))
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    pending = list(reversed(todo))
    inflight: dict[int, tuple[int, bytes, float, int]] = {}  # qid -> (index, wire, sent at, tries)
    free_ids = rng.sample(range(1, 65536), k=min(65535, 4 * window))
    try:
        while pending or inflight:
            now = time.monotonic()
            while pending and len(inflight) < window:
                index = pending.pop()
                qid = free_ids.pop()
                wire = asks[index].wire(qid)
                inflight[qid] = (index, wire, now, 1)
                sock.send(wire)
            for qid, (index, wire, sent, tries) in list(inflight.items()):
                if now - sent > timeout:
                    if tries > retries:
                        del inflight[qid]
                        free_ids.insert(0, qid)
                    else:
                        inflight[qid] = (index, wire, now, tries + 1)
                        sock.send(wire)
            if not sel.select(0.05):
                continue
            while True:
                try:
                    data = sock.recv(65535)
                except BlockingIOError:
                    break
                except ConnectionRefusedError:
                    continue  # ICMP from a dead port; timeouts handle it
                if len(data) < 12:
                    continue
                (qid,) = struct.unpack_from(">H", data)
                entry = inflight.get(qid)
                if entry is None or not _same_question(entry[1], data):
                    continue  # a late reply to an earlier use of this ID
                index = entry[0]
                replies[index] = data
                del inflight[qid]
                free_ids.insert(0, qid)
    finally:
        sel.close()
        sock.close()


def _question_end(wire: bytes) -> int:
    i = 12
    while wire[i]:
        i += wire[i] + 1
    return i + 5


def _same_question(query: bytes, reply: bytes) -> bool:
    end = _question_end(query)
    return reply[12:end] == query[12:end]


def _tcp(port: Server, asks: list[Ask], chunk: list[int], replies: list[bytes | None], timeout: float) -> None:
    """Pipeline `chunk` on one connection; retried once on a new one only if nothing came back."""
    for _attempt in range(2):
        ids = {}
        out = bytearray()
        for n, index in enumerate(chunk):
            qid = 1000 + n
            ids[qid] = index
            wire = asks[index].wire(qid)
            out += struct.pack(">H", len(wire)) + wire
        got = 0
        try:
            sock = socket.create_connection(address(port), timeout=timeout)
        except OSError:
            continue
        try:
            sock.sendall(out)
            buf = b""
            while ids:
                try:
                    data = sock.recv(65535)  # times out `timeout` after the last data
                except OSError:
                    break
                if not data:
                    break
                buf += data
                while len(buf) >= 2:
                    (length,) = struct.unpack_from(">H", buf)
                    if len(buf) < 2 + length:
                        break
                    msg, buf = buf[2 : 2 + length], buf[2 + length :]
                    if len(msg) >= 12:
                        index = ids.pop(struct.unpack_from(">H", msg)[0], None)
                        if index is not None:
                            replies[index] = msg
                            got += 1
        finally:
            sock.close()
        if got:
            return
