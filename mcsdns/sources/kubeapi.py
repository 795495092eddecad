"""The Kubernetes API as raw JSON over an authenticated urllib3 pool.

The connection settings (server, TLS, proxy, credentials) come from
kubeconfig.py, which reads the common kubeconfigs and the in-cluster service
account itself and leaves the rest to the `kubernetes` package. That
package's model classes are never built: a list of 50k EndpointSlices as models
costs gigabytes and seconds of CPU, while the JSON dicts read here are turned
one by one into the small records of objects.py and dropped.

Every call blocks, so the watch runs it on its own threads (see watching.py).
Failures surface as the narrow ApiError subclasses below, mapped from the
HTTP status (or from a watch's ERROR event), raised `from` the original.
"""

from __future__ import annotations

import logging
import queue
import re
import socket
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import urllib3

from .. import __version__
from . import decode
from .kubeconfig import ConnectionSettings, KubeConfigError, load_settings  # noqa: F401 - KubeConfigError: re-exported

log = logging.getLogger(__name__)

USER_AGENT = f"mcsdns/{__version__}"
JSON = "application/json"
# Namespaces are read as metadata only: the API then never sends spec/status.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"

CONNECT_TIMEOUT = 10.0  # a reachable API server accepts TCP+TLS far faster; beyond this it is down
# List and discovery requests: how long one may stay silent (per read: the first byte of one
# 500-object page or of a discovery document, then each next one). A healthy API server sends a
# page in well under a second, so the first attempt gives up after LIST_TIMEOUT, on a link that
# stalled: the retry opens a new connection. A busy API server may legitimately queue a request
# for up to 15 s (priority and fairness), so each timed-out attempt doubles the next one's limit,
# up to REQUEST_TIMEOUT (the watch resets it after a complete list).
LIST_TIMEOUT = 5.0
REQUEST_TIMEOUT = 30.0


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A request to the API server failed; `status` is the HTTP status (0: no answer)."""

    status = 0

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class Unreachable(ApiError):
    """No usable answer: connection refused or reset, timeout, TLS failure, broken stream."""


class TimedOut(Unreachable):
    """Connected, but nothing arrived within the read timeout: a stalled link or a queued request."""


class Unauthorized(ApiError):
    """401: the API server rejected the credentials."""

    status = 401


class Forbidden(ApiError):
    """403: RBAC does not allow the request."""

    status = 403


class NotFound(ApiError):
    """404: the resource (or its API group, e.g. a missing CRD) is not served."""

    status = 404


class NotInstalled(NotFound):
    """Discovery shows no served version of a custom resource: its CRD is not installed."""


class Gone(ApiError):
    """410: the resourceVersion (or list continue token) expired; list again."""

    status = 410


class Throttled(ApiError):
    """429: too many requests, or the API server's storage is (re)initializing."""

    status = 429


class ServerError(ApiError):
    """5xx, or an answer that is not the JSON it should be."""


_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Gone, 429: Throttled}


def error_for(status: int, body: Any) -> ApiError:
    """The ApiError for an HTTP status and its (decoded) `Status` body or text."""
    message = body.get("message") if isinstance(body, dict) else None
    if not message:
        message = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    message = " ".join(message.split())[:500] or f"HTTP {status}"
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(message, status)


def _describe(exc: BaseException) -> str:
    """A short, stable text for a transport error (drops urllib3's object reprs)."""
    text = re.sub(r"<[^>]*>:?\s*", "", str(exc)).strip(" :")
    return text or type(exc).__name__


# --------------------------------------------------------------------------- configuration


def load_configuration(kubeconfig: Path | None, context: str | None, in_cluster: bool) -> ConnectionSettings:
    """The connection settings of a kubeconfig file or the service account (see kubeconfig.py)."""
    return load_settings(kubeconfig, context, in_cluster)


# --------------------------------------------------------------------------- the connection


class ApiConnection:
    """GETs of JSON documents and watch streams, authenticated like the client library.

    Thread-safe: urllib3's pool hands each thread its own connection.
    """

    def __init__(self, settings: ConnectionSettings | Any) -> None:
        """`settings` from load_configuration, or a kubernetes.client.Configuration."""
        if not isinstance(settings, ConnectionSettings):
            settings = ConnectionSettings.from_library(settings)
        self.settings = settings
        self.pool = settings.pool()
        self.host = settings.host.rstrip("/")
        self._auth: dict[str, str] | None = None  # the last credentials sent (see _headers)

    def close(self) -> None:
        self.pool.clear()

    def drop_idle(self) -> int:
        """Close every idle pooled connection (in-use ones are untouched); returns how many.

        An idle keep-alive connection can stall unnoticed (a proxy or NAT that stopped
        forwarding keeps it open and silent; urllib3 only notices one the peer closed), and
        the next request sent on it would wait for its read timeout. The watch calls this
        before each list and each watch stream, and when it detected a stall, so those
        requests start on a new connection. The pools stay open: a thread between two
        pages just opens a new connection for its next one.
        """
        dropped = 0
        pools = self.pool.pools
        for key in list(pools.keys()):
            try:
                idle = getattr(pools[key], "pool", None)  # the pool's LIFO queue of connections (None: closed)
            except KeyError:
                continue
            if idle is None:
                continue
            taken = []
            while True:
                try:
                    taken.append(idle.get(block=False))
                except queue.Empty:
                    break
            for conn in taken:
                if conn is not None:
                    conn.close()
                    dropped += 1
                try:
                    idle.put(None, block=False)  # keep the pool's capacity: a slot for a new connection
                except queue.Full:
                    pass  # another thread returned a connection meanwhile
        return dropped

    def _headers(self, accept: str) -> dict[str, str]:
        """Accept, User-Agent and the credentials (a token file is re-read as it rotates).

        A token file (the service account's, a kubeconfig's tokenFile) is re-read every minute, by
        kubeconfig.TokenFile or by the library's hook inside auth_settings(); if that fails
        (the file briefly missing or empty while kubelet rewrites it), the last good credentials
        are sent again, as client-go does. Without any, the request fails as Unauthorized: the
        watch retries it with backoff and /ready says why, instead of the watch thread dying.
        """
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        try:
            auth = self._credentials()
        except Exception as exc:  # noqa: BLE001 - the library's hook (or a file read) raises anything
            if self._auth is None:
                raise Unauthorized(f"cannot read the client credentials: {type(exc).__name__}: {exc}") from None
            log.warning("cannot refresh the client credentials (%s: %s); sending the last good ones", type(exc).__name__, exc)
            auth = self._auth
        self._auth = auth
        headers.update(auth)
        return headers

    def _credentials(self) -> dict[str, str]:
        auth: dict[str, str] = {}
        for key, value in self.settings.credentials().items():
            # A token file is sent as read ("bearer " + content): a trailing
            # newline (a token written by hand or by `kubectl create token > token`) makes urllib3
            # raise ValueError with the token in its message, which would stop the watch and log
            # the credential. Trim it, as client-go does; refuse what still cannot be a header.
            scheme, _, credentials = value.strip().partition(" ")
            value = f"{scheme} {credentials.strip()}" if credentials.strip() else scheme
            if not value.isascii() or not value.isprintable():
                raise KubeConfigError(
                    f"the {key} credentials hold control or non-ASCII characters: "
                    "check the service account token file (or the kubeconfig)"
                )
            auth[key] = value
        return auth

    def open(self, path: str, query: dict[str, Any] | None, accept: str, read_timeout: float) -> Any:
        """Send a GET and return the unread urllib3 response; >= 300 raises the mapped error."""
        url = self.host + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        try:
            resp = self.pool.request(
                "GET",
                url,
                headers=self._headers(accept),
                preload_content=False,
                retries=False,  # the watch owns retries and their backoff
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read_timeout),
            )
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            raise TimedOut(f"{self.host}: {_describe(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"{self.host}: {_describe(exc)}") from exc
        if resp.status >= 300:
            try:
                raw = resp.data
            except (urllib3.exceptions.HTTPError, OSError):
                raw = b""
            finally:
                resp.release_conn()
            try:
                body: Any = decode.loads(raw) if raw else None
            except ValueError:
                body = raw
            raise error_for(resp.status, body)
        return resp

    def get(self, path: str, query: dict[str, Any] | None = None, accept: str = JSON,
            timeout: float = REQUEST_TIMEOUT, parse: Callable[[bytes], Any] = decode.loads) -> dict:
        """One JSON document (a list page, a discovery document); `timeout` bounds each silence.

        `parse` decodes it: `decode.page` for list pages (only the fields DNS reads), else all of it.
        """
        resp = self.open(path, query, accept, timeout)
        try:
            raw = resp.data
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            raise TimedOut(f"{self.host}: {_describe(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"{self.host}: {_describe(exc)}") from exc
        finally:
            resp.release_conn()
        try:
            doc = parse(raw)
        except ValueError as exc:
            raise ServerError(f"GET {path}: the answer is not JSON") from exc
        if not isinstance(doc, dict):
            raise ServerError(f"GET {path}: expected a JSON object")
        return doc


def stream_lines(resp: Any) -> Iterator[bytes]:
    """The newline-delimited JSON documents of a watch, each as soon as it arrives."""
    buffer = bytearray()
    try:
        for chunk in resp.stream(amt=None, decode_content=True):
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Unreachable(f"watch stream broken: {_describe(exc)}") from exc
    if bytes(buffer).strip():
        yield bytes(buffer)


def set_read_timeout(resp: Any, seconds: float) -> bool:
    """Give the reads still to come on `resp` a new timeout (its socket's); False if it has no socket.

    A streamed list waits for its headers as long as a list page may (LIST_TIMEOUT), and
    then reads on as a watch, whose reads may be silent much longer.
    """
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is None:
        return False
    try:
        sock.settimeout(seconds)
    except OSError:
        return False
    return True


def interrupt(resp: Any) -> None:
    """Unblock a thread reading `resp` (from another thread), so shutdown never waits on a watch.

    urllib3 >= 2.3 has HTTPResponse.shutdown(); older ones get the socket shut down directly.
    """
    try:
        shutdown = getattr(resp, "shutdown", None)
        if shutdown is not None:
            shutdown()
            return
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass
