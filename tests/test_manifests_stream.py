"""The manifests source converts objects as it decodes them (sources/manifests.read_documents).

A file is still all or nothing: one that fails to parse part-way keeps its last good objects and
reports only the parse error, not the objects read before it; a JSON `kind: List` read item by
item gives the same objects as the same file read whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mcsdns.sources.manifests import ManifestSource, read_documents
from mcsdns.store import Store

NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}


def service_import(name: str, ip: str = "10.9.0.1") -> dict:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"type": "ClusterSetIP", "ips": [ip], "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}  # fmt: skip


def load(path: Path) -> tuple[ManifestSource, list[str]]:
    errors: list[str] = []
    source = ManifestSource([path], Store(), on_error=errors.append)
    source.load()
    return source, errors


def test_json_list_items_are_what_the_whole_file_gives(tmp_path):
    items = [NS, service_import("a"), service_import("b", "fd00::1"), {"kind": "ConfigMap"}, 5, None,
             {**service_import("bad"), "spec": {"type": "ClusterSetIP", "ips": "nope"}}]  # fmt: skip
    doc = {"apiVersion": "v1", "kind": "List", "items": items, "big": 123456789012345678901234567890}
    path = tmp_path / "list.json"
    path.write_text(json.dumps(doc))
    assert [(p, raw) for p, raw in read_documents(path)] == [(f"document 1 item {j}", it) for j, it in enumerate(items, 1)]
    source, errors = load(path)
    assert set(source.store.imports) == {("ns", "a"), ("ns", "b")}
    assert errors == ["spec.ips"]  # the one rejection, counted once
    # The same objects as YAML documents: the same store.
    yaml_path = tmp_path / "docs.yaml"
    yaml_path.write_text(yaml.safe_dump_all(items))
    other, _ = load(yaml_path)
    assert other.store.imports == source.store.imports


def test_a_file_broken_after_good_and_bad_objects_keeps_its_last_good_state(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all([NS, service_import("a")]))
    source, errors = load(path)
    assert set(source.store.imports) == {("ns", "a")} and not errors
    broken = yaml.safe_dump_all([service_import("b"), {**service_import("bad"), "metadata": {"name": "Bad!", "namespace": "ns"}}])
    path.write_text(broken + "---\nkind: [unclosed\n")
    errors.clear()
    source.files[path].stamp = None  # re-read now (the poll would notice the new stamp)
    source.load()
    assert errors == ["invalid_yaml"]  # not the rejection of the object read before the error
    assert set(source.store.imports) == {("ns", "a")}  # b, read before the error, is not served


def test_windows_line_ends_read_as_before(tmp_path):
    path = tmp_path / "crlf.yaml"
    path.write_bytes(yaml.safe_dump_all([NS, service_import("a")]).replace("\n", "\r\n").encode())
    source, errors = load(path)
    assert set(source.store.imports) == {("ns", "a")} and not errors
