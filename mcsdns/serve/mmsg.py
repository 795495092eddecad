"""recvmmsg/sendmmsg through ctypes: a batch of UDP datagrams in one system call each way.

At cached-answer rates one `recvfrom` and one `sendto` per datagram are the largest cost of a
query. A `Batch` owns everything the two calls need,
allocated once per listening socket: one receive slot and one send slot of 65,536 bytes per
datagram (anonymous mmap: the kernel maps a page only when it is written, so a slot that only ever
sees small packets costs one page, not 64 KB), a 128-byte sockaddr_storage per datagram, and the
iovec and mmsghdr arrays pointing into them. The per-datagram accessors read and write those
arrays through integer memoryviews (a ctypes attribute access costs several times more).

Replies go back to the sockaddr bytes the query came from (no address text or tuple per packet):
a reply's send header uses the storage of the datagram at its own position in the batch, so when
some datagrams get no reply (dropped, forwarded) the others' addresses move down to close the gap.

Only Linux has these calls (glibc >= 2.14, musl >= 1.1.x); `available()` says whether this
process can use them, and the transport falls back to a recvfrom/sendto loop when not.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import socket
import struct
import sys
from typing import Any

SLOT = 1 << 16  # bytes per datagram slot, receive and send alike (a page-aligned 64 KB)
RECV_SIZE = 65535  # what one slot receives: recvfrom(65535) as the plain path reads
NAME = 128  # sizeof(struct sockaddr_storage)
MSG_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0x40)


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _Msghdr), ("msg_len", ctypes.c_uint)]


# Offsets in 4-byte units into an mmsghdr array viewed as unsigned ints, and the iovec's length in
# size_t units: what the per-datagram accessors index.
_HDR = ctypes.sizeof(_Mmsghdr) // 4
_NAMELEN = _Msghdr.msg_namelen.offset // 4
_MSGLEN = _Mmsghdr.msg_len.offset // 4
_IOV = ctypes.sizeof(_Iovec) // ctypes.sizeof(ctypes.c_size_t)
_IOVLEN = _Iovec.iov_len.offset // ctypes.sizeof(ctypes.c_size_t)
_SIZE_T = "Q" if ctypes.sizeof(ctypes.c_size_t) == 8 else "I"
_PORT = struct.Struct(">H")


def _calls() -> tuple[Any, Any] | None:
    """libc's recvmmsg and sendmmsg, or None where this platform lacks them.

    Declared without `argtypes`: the callers pass only ints (C ints: the descriptor, counts and
    flags), None (NULL) and ready-made `c_void_p`s, which ctypes hands over as they are. With
    `argtypes` every call would convert its arguments again, a ctypes array to `c_void_p` the dearest,
    twice per wakeup, which at light load (one datagram per wakeup) is paid by every query.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        recv, send = libc["recvmmsg"], libc["sendmmsg"]  # (fresh function objects: no one else's argtypes)
    except (OSError, AttributeError):
        return None
    recv.restype = send.restype = ctypes.c_int
    return recv, send


_CALLS = _calls()


def available() -> bool:
    """Whether libc has recvmmsg and sendmmsg (an ENOSYS from the kernel is found on first use)."""
    return _CALLS is not None


class Unsupported(OSError):
    """The kernel has no recvmmsg/sendmmsg (ENOSYS): use the plain path."""


def sockaddr_tuple(raw: bytes) -> tuple:
    """A sockaddr_in/sockaddr_in6 as recvfrom gives it: (host, port) or (host, port, flowinfo, scope_id)."""
    family = int.from_bytes(raw[0:2], sys.byteorder)
    port = _PORT.unpack_from(raw, 2)[0]
    if family == socket.AF_INET6:
        flow = int.from_bytes(raw[4:8], "big")  # sin6_flowinfo is in network order, as recvfrom reports it
        scope = int.from_bytes(raw[24:28], sys.byteorder)
        return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port, flow, scope
    return socket.inet_ntop(socket.AF_INET, raw[4:8]), port


class Batch:
    """Buffers and headers for `size` datagrams received, and up to `size` replies, per call.

    Use: `n = recv(fd)`; for each i < n `data(i)` (and `address(i)` when a tuple is needed); for
    each reply, in order, `put(j, i, reply)` with j counting the replies (j <= i); then `send(fd, j)`.
    """

    def __init__(self, size: int = 64) -> None:
        if _CALLS is None:
            raise Unsupported(errno.ENOSYS, "recvmmsg/sendmmsg not available")
        self.size = size
        self._recv_call, self._send_call = _CALLS
        self.rbuf = mmap.mmap(-1, size * SLOT)  # anonymous, zero pages until written
        self.sbuf = mmap.mmap(-1, size * SLOT)
        self.names = mmap.mmap(-1, size * NAME)
        # from_buffer exports the mmaps: they cannot be closed or resized while these live.
        self._anchors = [ctypes.c_char.from_buffer(m) for m in (self.rbuf, self.sbuf, self.names)]
        rbase, sbase, nbase = (ctypes.addressof(a) for a in self._anchors)
        self._riov = (_Iovec * size)()
        self._siov = (_Iovec * size)()
        self._rhdr = (_Mmsghdr * size)()
        self._shdr = (_Mmsghdr * size)()
        for i in range(size):
            self._riov[i].iov_base, self._riov[i].iov_len = rbase + i * SLOT, RECV_SIZE
            self._siov[i].iov_base = sbase + i * SLOT
            for hdrs, iovs in ((self._rhdr, self._riov), (self._shdr, self._siov)):
                h = hdrs[i].msg_hdr
                h.msg_name, h.msg_namelen = nbase + i * NAME, NAME
                h.msg_iov, h.msg_iovlen = ctypes.addressof(iovs[i]), 1
        self._rbytes = memoryview(self._rhdr).cast("B")
        self._rfresh = memoryview(bytes(self._rbytes))  # the receive headers as recv() must find them (namelen 128)
        self._used = 0  # headers the last recv() let the kernel write: only their namelen needs putting back
        self._rint = self._rbytes.cast("I")
        self._sint = memoryview(self._shdr).cast("B").cast("I")
        self._slen = memoryview(self._siov).cast("B").cast(_SIZE_T)
        self._hdr_size = ctypes.sizeof(_Mmsghdr)
        self._rhdr_at = ctypes.c_void_p(ctypes.addressof(self._rhdr))  # the calls' pointer arguments, made once
        self._shdr_at = ctypes.c_void_p(ctypes.addressof(self._shdr))
        self.peers = [Peer(self, i) for i in range(size)]  # observers' lazy client addresses, one per slot

    def close(self) -> None:
        """Release the views and buffers (after the socket's last use)."""
        self.peers.clear()
        for view in (self._slen, self._sint, self._rint, self._rbytes, self._rfresh):
            view.release()
        self._anchors.clear()
        for m in (self.rbuf, self.sbuf, self.names):
            m.close()

    # ------------------------------------------------------------------ receive

    def recv(self, fd: int) -> int:
        """Datagrams now queued on `fd`, up to `size`, in one call: their count, 0 when none.

        Raises OSError for a receive error (EINTR included), Unsupported when the kernel lacks the call.
        """
        # namelen back to 128 where the kernel wrote the real one: at light load one slot, one store
        used = self._used
        if used == 1:
            self._rint[_NAMELEN] = NAME
        elif used:
            end = used * self._hdr_size
            self._rbytes[:end] = self._rfresh[:end]
        n = self._recv_call(fd, self._rhdr_at, self.size, MSG_DONTWAIT, None)
        if n >= 0:
            self._used = n
            return n
        self._used = self.size  # (whatever an error left written: every header is reset next time)
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EWOULDBLOCK):
            return 0
        if err == errno.ENOSYS:
            raise Unsupported(err, "recvmmsg: not implemented by this kernel")
        raise OSError(err, f"recvmmsg: {errno.errorcode.get(err, err)}")

    def data(self, i: int) -> bytes:
        """The bytes of datagram i (at most 65,535, as recvfrom(65535) returns)."""
        start = i * SLOT
        return self.rbuf[start : start + self._rint[i * _HDR + _MSGLEN]]

    def address(self, i: int) -> tuple:
        """Datagram i's source as recvfrom would give it (a tuple: only when one is needed)."""
        start = i * NAME
        return sockaddr_tuple(self.names[start : start + self._rint[i * _HDR + _NAMELEN]])

    # ------------------------------------------------------------------ send

    def put(self, j: int, i: int, reply: bytes) -> bool:
        """Reply j of this batch is `reply`, to datagram i's source (j <= i; call in order of j).

        False, and nothing put, for a reply over 65,535 bytes (no UDP datagram is that big: the
        caller sends it alone, and gets the kernel's error for it as the plain path does)."""
        size = len(reply)
        if size > RECV_SIZE:
            return False
        if j != i:  # close the gap left by datagrams without a reply: slot j's own query is answered
            self.names[j * NAME : (j + 1) * NAME] = self.names[i * NAME : (i + 1) * NAME]
        self._sint[j * _HDR + _NAMELEN] = self._rint[i * _HDR + _NAMELEN]
        self._slen[j * _IOV + _IOVLEN] = size
        start = j * SLOT
        self.sbuf[start : start + size] = reply
        return True

    def send(self, fd: int, count: int) -> list[tuple[int, OSError]]:
        """Send replies 0..count-1; the ones the kernel refused, as (j, error), usually none.

        A refused reply (a full send buffer, an unreachable client, a source port 0) is skipped and
        the rest still sent. Where the kernel lacks sendmmsg every reply is refused with an
        `Unsupported` error: the caller can still send those one by one.
        """
        refused: list[tuple[int, OSError]] = []
        start = 0
        while start < count:
            at = self._shdr_at if not start else ctypes.c_void_p(self._shdr_at.value + start * self._hdr_size)
            n = self._send_call(fd, at, count - start, 0)
            if n > 0:
                start += n
                continue
            err = ctypes.get_errno() if n < 0 else errno.EIO
            if err == errno.EINTR:
                continue
            if err == errno.ENOSYS:
                refused += [(j, Unsupported(err, "sendmmsg: not implemented by this kernel")) for j in range(start, count)]
                break
            refused.append((start, OSError(err, errno.errorcode.get(err, str(err)))))
            start += 1
        return refused

    def reply(self, j: int) -> bytes:
        """The bytes of reply j as put."""
        start = j * SLOT
        return self.sbuf[start : start + self._slen[j * _IOV + _IOVLEN]]

    def sent_address(self, j: int) -> tuple:
        """Reply j's destination as a tuple (for an error message)."""
        start = j * NAME
        return sockaddr_tuple(self.names[start : start + self._sint[j * _HDR + _NAMELEN]])


class Peer:
    """Datagram i's source for an observer, made into a tuple only if one asks (`address()`).

    One per slot, reused by every batch: it names the datagram being observed during the observer
    call only (the query log and the metrics' error lines format it then; nothing keeps it).
    """

    __slots__ = ("batch", "index")

    def __init__(self, batch: Batch, index: int) -> None:
        self.batch = batch
        self.index = index

    def address(self) -> tuple:
        return self.batch.address(self.index)

    def __repr__(self) -> str:
        return repr(self.address())


class Burst:
    """Fixed datagrams sent over and over on a connected socket, many per sendmmsg.

    What a load generator needs to flood a server that itself batches (for the tools, never the
    server): one call per slice of `packets`, no Python work per datagram.
    """

    def __init__(self, packets: list[bytes]) -> None:
        if _CALLS is None:
            raise Unsupported(errno.ENOSYS, "sendmmsg not available")
        self._send_call = _CALLS[1]
        self._keep = [ctypes.create_string_buffer(p, len(p)) for p in packets]
        self._iov = (_Iovec * len(packets))()
        self._hdr = (_Mmsghdr * len(packets))()
        for i, buf in enumerate(self._keep):
            self._iov[i].iov_base, self._iov[i].iov_len = ctypes.addressof(buf), len(packets[i])
            self._hdr[i].msg_hdr.msg_iov, self._hdr[i].msg_hdr.msg_iovlen = ctypes.addressof(self._iov[i]), 1
        self._hdr_size = ctypes.sizeof(_Mmsghdr)

    def send(self, fd: int, start: int, count: int) -> int:
        """Send packets start..start+count-1 (within the list) on connected `fd`: how many went out.
        Raises OSError when none did (a full send buffer: BlockingIOError; a refusal reported by an
        earlier ICMP: ConnectionRefusedError)."""
        n = self._send_call(fd, ctypes.c_void_p(ctypes.addressof(self._hdr) + start * self._hdr_size), count, 0)
        if n < 0:
            err = ctypes.get_errno()
            raise OSError(err, errno.errorcode.get(err, str(err)))
        return n
