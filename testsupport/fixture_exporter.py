"""A minimal MCS exporter for a clusterset of one cluster. It exists to drive the mcs-api
conformance suite (testsupport/conformance.py) against mcsdns and CoreDNS; it is not an MCS
implementation to run anywhere else.

Written from KEP-1645 and what the suite checks, for the export side only (the reference
controller of mcs-api gives ClusterSetIP imports their derived-Service IPs):

- a ServiceExport gets the conditions `Valid` (False with NoService or InvalidServiceType for a
  missing or ExternalName Service), `Ready` and `Conflict` (always False: one cluster cannot
  conflict with itself);
- a valid export gets a ServiceImport (multicluster.x-k8s.io/v1beta1) of the same name: type
  Headless for `clusterIP: None`, else ClusterSetIP; the Service's ports, ipFamilies,
  sessionAffinity(+Config), internalTrafficPolicy and trafficDistribution; the export's
  exportedLabels/exportedAnnotations; `status.clusters` naming this cluster. `spec.ips` is left
  to the reference controller;
- every EndpointSlice of the Service is copied into one labelled
  `multicluster.kubernetes.io/service-name` and `.../source-cluster` (managed by this exporter,
  so Kubernetes' controller leaves it alone);
- unexporting (or deleting the Service) deletes the import and the copies.

It runs in the cluster as a Deployment of the mcsdns image (this one file, mounted from a
ConfigMap, run by the image's Python), so it needs nothing but the standard library: a small
JSON client, one list+watch thread per resource feeding a queue of (namespace, name) keys, and
a level-triggered reconcile of each key.

    python3 fixture_exporter.py --cluster-id cluster-a                 # in a pod
    python3 -m testsupport.fixture_exporter --kubeconfig FILE ...      # outside, for a test
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import logging
import os
import queue
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

GROUP = "multicluster.x-k8s.io"
VERSION = "v1beta1"
MCS = f"/apis/{GROUP}/{VERSION}"
LABEL_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
LABEL_SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"
LABEL_K8S_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "fixture-exporter.mcsdns.test"  # must not be Kubernetes' endpointslice-controller.k8s.io
# Marks the ServiceImports this exporter made, so it deletes no import it did not make.
IMPORT_MARK = "mcsdns.test/fixture-exporter"
SERVICE_FIELDS = ("sessionAffinity", "sessionAffinityConfig", "internalTrafficPolicy", "trafficDistribution")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

log = logging.getLogger("fixture-exporter")


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {path}: {status} {body}")
        self.status = status


class Api:
    """JSON over HTTPS: a bearer token (in a pod) or a client certificate (a kubeconfig)."""

    def __init__(self, server: str, context: ssl.SSLContext, token_file: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(server)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self.context = context
        self.token_file = token_file

    @classmethod
    def in_cluster(cls) -> Api:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        if ":" in host:
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", ssl.create_default_context(cafile=f"{SA_DIR}/ca.crt"),
                   f"{SA_DIR}/token")

    @classmethod
    def from_kubeconfig(cls, path: str) -> Api:
        import yaml  # only outside a pod; the mcsdns image has it too

        with open(path) as f:
            config = yaml.safe_load(f)
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        with tempfile.TemporaryDirectory() as tmp:  # ssl loads a client chain from files only
            cert, key = os.path.join(tmp, "cert"), os.path.join(tmp, "key")
            for name, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
                with open(name, "wb") as out:
                    out.write(base64.b64decode(user[field]))
            context.load_cert_chain(cert, key)
        return cls(cluster["server"], context)

    def _connect(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token_file:  # re-read each time: the kubelet rotates projected tokens
            with open(self.token_file) as f:
                headers["Authorization"] = "Bearer " + f.read().strip()
        return headers

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn = self._connect(30)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:  # "404 page not found" for a group not served (yet)
            decoded = raw.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(method, path, resp.status, decoded)
        return decoded

    def get(self, path: str) -> dict | None:
        try:
            return self.request("GET", path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path)
        except ApiError as err:
            if err.status != 404:
                raise

    def merge_patch(self, path: str, patch: dict) -> Any:
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def watch(self, path: str, resource_version: str) -> Iterator[dict]:
        query = urllib.parse.urlencode({"watch": "1", "resourceVersion": resource_version,
                                        "allowWatchBookmarks": "true", "timeoutSeconds": "240"})
        conn = self._connect(300)
        try:
            conn.request("GET", f"{path}?{query}", headers=self._headers())
            resp = conn.getresponse()
            if resp.status >= 400:
                raise ApiError("WATCH", path, resp.status, resp.read()[:200])
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()


def _selector(labels: dict[str, str]) -> str:
    return "?labelSelector=" + urllib.parse.quote(",".join(f"{k}={v}" for k, v in labels.items()))


class Exporter:
    """Watches ServiceExports, Services, EndpointSlices and ServiceImports; reconciles by key."""

    def __init__(self, api: Api, cluster_id: str) -> None:
        self.api = api
        self.cluster_id = cluster_id
        self.keys: queue.Queue[tuple[str, str]] = queue.Queue()
        self.stopping = threading.Event()

    # -- watching -------------------------------------------------------------

    def start_watches(self) -> None:
        for path in (f"{MCS}/serviceexports", f"{MCS}/serviceimports", "/api/v1/services",
                     "/apis/discovery.k8s.io/v1/endpointslices"):
            threading.Thread(target=self._list_watch, args=(path,), name=path, daemon=True).start()

    def _keys_of(self, obj: dict) -> Iterator[tuple[str, str]]:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace")
        if not namespace:
            return
        if obj.get("kind") == "EndpointSlice" or "addressType" in obj:
            labels = meta.get("labels") or {}
            for label in (LABEL_K8S_SERVICE_NAME, LABEL_SERVICE_NAME):
                if labels.get(label):
                    yield namespace, labels[label]
        else:
            yield namespace, meta["name"]

    def _list_watch(self, path: str) -> None:
        """List, queue every key, then watch from the list's version; again after any failure."""
        while not self.stopping.is_set():
            try:
                listing = self.api.request("GET", path)
                for item in listing.get("items", []):
                    item.setdefault("kind", listing.get("kind", "").removesuffix("List"))
                    for key in self._keys_of(item):
                        self.keys.put(key)
                version = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for event in self.api.watch(path, version):
                        if event["type"] == "ERROR":
                            raise ApiError("WATCH", path, event["object"].get("code", 0), event["object"])
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            for key in self._keys_of(event["object"]):
                                self.keys.put(key)
            except Exception as err:  # noqa: BLE001 - a watcher never dies; it lists again
                log.warning("watch %s: %s; listing again in 1 s", path, err)
                time.sleep(1)

    def run(self) -> None:
        self.start_watches()
        log.info("exporting for cluster %s", self.cluster_id)
        while not self.stopping.is_set():
            try:
                pending = {self.keys.get(timeout=0.5)}
            except queue.Empty:
                continue
            while not self.keys.empty():  # one reconcile per key however many events arrived
                pending.add(self.keys.get_nowait())
            for key in sorted(pending):
                try:
                    self.reconcile(*key)
                except Exception as err:  # noqa: BLE001 - retry the key after a pause
                    log.warning("reconcile %s/%s: %s; retrying", key[0], key[1], err)
                    threading.Timer(1.0, self.keys.put, args=(key,)).start()

    # -- reconciling ------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> None:
        export = self.api.get(f"{MCS}/namespaces/{namespace}/serviceexports/{name}")
        if export is None or export["metadata"].get("deletionTimestamp"):
            self._unexport(namespace, name)
            return
        service = self.api.get(f"/api/v1/namespaces/{namespace}/services/{name}")
        if service is None or service["metadata"].get("deletionTimestamp"):
            self._conditions(export, False, "NoService", f"Service {namespace}/{name} not found")
            self._unexport(namespace, name)
            return
        if service["spec"].get("type") == "ExternalName":
            self._conditions(export, False, "InvalidServiceType", "ExternalName Services cannot be exported")
            self._unexport(namespace, name)
            return
        self._import(export, service)
        self._slices(namespace, name)
        self._conditions(export, True, "Valid", "")

    def _conditions(self, export: dict, valid: bool, reason: str, message: str) -> None:
        want = [("Valid", valid, reason, message),
                ("Ready", valid, "Exported" if valid else "Failed", "" if valid else message),
                ("Conflict", False, "NoConflicts", "")]
        have = {c["type"]: c for c in export.get("status", {}).get("conditions") or []}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions, changed = [], False
        for kind, status, why, text in want:
            old = have.get(kind)
            value = "True" if status else "False"
            if old and (old["status"], old.get("reason"), old.get("message", "")) == (value, why, text):
                conditions.append(old)
                continue
            changed = True
            conditions.append({"type": kind, "status": value, "reason": why, "message": text,
                               "observedGeneration": export["metadata"].get("generation", 1),
                               "lastTransitionTime": old["lastTransitionTime"] if old and old["status"] == value else now})
        if changed:
            meta = export["metadata"]
            self.api.merge_patch(f"{MCS}/namespaces/{meta['namespace']}/serviceexports/{meta['name']}/status",
                                 {"status": {"conditions": conditions}})

    def _import(self, export: dict, service: dict) -> None:
        meta, spec = export["metadata"], service["spec"]
        namespace, name = meta["namespace"], meta["name"]
        path = f"{MCS}/namespaces/{namespace}/serviceimports/{name}"
        want_spec: dict[str, Any] = {
            "type": "Headless" if spec.get("clusterIP") == "None" else "ClusterSetIP",
            "ports": [{k: p[k] for k in ("name", "protocol", "port", "appProtocol") if k in p}
                      for p in spec.get("ports", [])],
            "ipFamilies": spec.get("ipFamilies", []),
        }
        for field in SERVICE_FIELDS:
            if field in spec:
                want_spec[field] = spec[field]
        export_spec = export.get("spec") or {}
        labels = dict(export_spec.get("exportedLabels") or {}, **{IMPORT_MARK: "true"})
        annotations = dict(export_spec.get("exportedAnnotations") or {})
        current = self.api.get(path)
        if current is None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServiceImport",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
                    "spec": want_spec}
            try:
                current = self.api.request("POST", f"{MCS}/namespaces/{namespace}/serviceimports", body)
            except ApiError as err:
                if err.status != 409:
                    raise
                current = self.api.request("GET", path)
            log.info("created ServiceImport %s/%s (%s)", namespace, name, want_spec["type"])
        else:
            have_meta = current["metadata"]
            differs = {k: v for k, v in want_spec.items() if current.get("spec", {}).get(k) != v}
            label_diff = {k: v for k, v in labels.items() if (have_meta.get("labels") or {}).get(k) != v}
            annotation_diff = {k: v for k, v in annotations.items() if (have_meta.get("annotations") or {}).get(k) != v}
            if differs or label_diff or annotation_diff:
                self.api.merge_patch(path, {"metadata": {"labels": label_diff, "annotations": annotation_diff},
                                            "spec": differs})
                log.info("updated ServiceImport %s/%s: %s", namespace, name, sorted(differs))
        clusters = [{"cluster": self.cluster_id}]
        if (current.get("status") or {}).get("clusters") != clusters:
            self.api.merge_patch(f"{path}/status", {"status": {"clusters": clusters}})

    def _slice_name(self, source: str, service: str) -> str:
        digest = hashlib.sha256(f"{self.cluster_id}/{source}".encode()).hexdigest()[:8]
        return f"{service[:40]}-{self.cluster_id[:12]}-{digest}"

    def _slices(self, namespace: str, name: str) -> None:
        base = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        sources = self.api.request("GET", base + _selector({LABEL_K8S_SERVICE_NAME: name}))["items"]
        ours = {s["metadata"]["name"]: s for s in self.api.request(
            "GET", base + _selector({LABEL_SERVICE_NAME: name, LABEL_MANAGED_BY: MANAGED_BY}))["items"]}
        wanted = set()
        for source in sources:
            if (source["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY:
                continue
            copy_name = self._slice_name(source["metadata"]["name"], name)
            wanted.add(copy_name)
            labels = {LABEL_SERVICE_NAME: name, LABEL_SOURCE_CLUSTER: self.cluster_id, LABEL_MANAGED_BY: MANAGED_BY}
            endpoints = [{k: e[k] for k in ("addresses", "conditions", "hostname", "zone") if k in e}
                         for e in source.get("endpoints") or []]
            body = {"addressType": source["addressType"], "endpoints": endpoints, "ports": source.get("ports") or []}
            have = ours.get(copy_name)
            if have is None:
                self.api.request("POST", base, {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                                "metadata": {"name": copy_name, "namespace": namespace,
                                                             "labels": labels}, **body})
                log.info("created EndpointSlice %s/%s (%d endpoints)", namespace, copy_name, len(endpoints))
            elif any((have.get(k) or []) != v for k, v in body.items() if k != "addressType"):
                self.api.merge_patch(f"{base}/{copy_name}", {"endpoints": endpoints, "ports": body["ports"]})
                log.info("updated EndpointSlice %s/%s (%d endpoints)", namespace, copy_name, len(endpoints))
        for stale in set(ours) - wanted:
            self.api.delete(f"{base}/{stale}")
            log.info("deleted EndpointSlice %s/%s", namespace, stale)

    def _unexport(self, namespace: str, name: str) -> None:
        path = f"{MCS}/namespaces/{namespace}/serviceimports/{name}"
        current = self.api.get(path)
        if current is not None and (current["metadata"].get("labels") or {}).get(IMPORT_MARK):
            self.api.delete(path)
            log.info("deleted ServiceImport %s/%s", namespace, name)
        base = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        for item in self.api.request("GET", base + _selector({LABEL_SERVICE_NAME: name, LABEL_MANAGED_BY: MANAGED_BY}))["items"]:
            self.api.delete(f"{base}/{item['metadata']['name']}")
            log.info("deleted EndpointSlice %s/%s", namespace, item["metadata"]["name"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster-id", default="cluster-a", help="this cluster's id (source-cluster label)")
    parser.add_argument("--kubeconfig", help="outside a pod: a kubeconfig with embedded client certificate")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    api = Api.from_kubeconfig(args.kubeconfig) if args.kubeconfig else Api.in_cluster()
    exporter = Exporter(api, args.cluster_id)
    signal.signal(signal.SIGTERM, lambda *_: exporter.stopping.set())
    try:
        exporter.run()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
