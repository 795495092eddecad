"""Writing the data set into the test bed's kube-apiserver, fast.

`KubeClient` of testsupport/testbed.py opens one TLS connection per request, which
is right for tests and far too slow for 100k objects. Here each worker thread
keeps one keep-alive connection, and objects are POSTed concurrently.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from typing import Any, Iterable

from testsupport.testbed import ApiError, KubeClient, object_path, resource_path


class Conn:
    """One keep-alive HTTPS connection to the API server, reconnecting on failure."""

    def __init__(self, client: KubeClient, timeout: float = 60.0) -> None:
        self.client = client
        self.timeout = timeout
        self._conn: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(5):
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(self.client.host, self.client.port,
                                                         context=self.client.context, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            decoded = json.loads(raw) if raw else None
            if resp.status == 429 or resp.status >= 500:  # overloaded or restarting: retry
                time.sleep(0.2 * (attempt + 1))
                continue
            if resp.status >= 400:
                raise ApiError(method, path, resp.status, decoded)
            return decoded
        raise ApiError(method, path, resp.status, decoded)

    def create(self, obj: dict) -> None:
        try:
            self.request("POST", object_path(obj, with_name=False), obj)
        except ApiError as err:
            if err.status != 409:  # already there from an earlier size: fine
                raise

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: dict) -> Any:
        return self.request("PATCH", resource_path(api_version, kind, namespace, name), patch,
                            content_type="application/merge-patch+json")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def create_all(client: KubeClient, objs: Iterable[dict], threads: int = 16) -> tuple[int, float]:
    """Create every object (namespaces first, in order); return (count, seconds)."""
    started = time.monotonic()
    todo: queue.Queue = queue.Queue(maxsize=threads * 64)
    errors: list[BaseException] = []
    count = 0

    def worker() -> None:
        conn = Conn(client)
        try:
            while True:
                obj = todo.get()
                if obj is None:
                    return
                if not errors:
                    try:
                        conn.create(obj)
                    except BaseException as exc:  # noqa: BLE001 - reported below
                        errors.append(exc)
        finally:
            conn.close()

    first = Conn(client)
    pool: list[threading.Thread] = []
    try:
        for obj in objs:
            count += 1
            if obj["kind"] == "Namespace":  # must exist before anything in it
                first.create(obj)
                continue
            if not pool:
                pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
                for t in pool:
                    t.start()
            todo.put(obj)
            if errors:
                break
    finally:
        for _ in pool:
            todo.put(None)
        for t in pool:
            t.join()
        first.close()
    if errors:
        raise errors[0]
    return count, time.monotonic() - started
