"""The manifests source: Kubernetes objects from YAML/JSON files, re-read on change.

Files hold objects exactly as `kubectl get -o yaml` prints them: several
documents per file, `kind: List`, or JSON. A namespace exists when a Namespace
object names it or any object lives in it (project decision 3).

Failure policy: a file that cannot be read or parsed keeps its last good
objects in service; an object that fails validation is skipped alone and its
last good version, if any, stays. Each error is logged with file, document
number and reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from typing import Any, Callable, Iterable, Iterator

import msgspec
import yaml

from ..objects import (KINDS, InvalidObject, Namespace, Object, ServiceImport, convert, object_ref, reason_of, report_omitted,
                       report_status_notes)
from ..store import Store
from . import decode
from .relist import Relist

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")
POLL_SECONDS = 1.0  # a changed file is re-read within 2 s (two polls at most)

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader


class ManifestError(Exception):
    """A manifest path that cannot be used at all (missing, not a file or directory)."""


@dataclass(slots=True)
class FileState:
    stamp: tuple[int, int, int] | None = None  # (mtime_ns, size, inode) of the last read
    objects: list[Object] = field(default_factory=list)  # last good objects
    invalid: set[tuple[str, str, str]] = field(default_factory=set)  # (kind, ns, name) rejected this time
    reasons: dict[tuple[str, str, str], str] = field(default_factory=dict)  # why, for /imports and /explain
    errors: int = 0
    loaded: bool = False  # read and parsed at least once
    problem: str = ""  # why the last read failed (with the line and the parser's reason): /ready, /imports

    def keeping(self) -> str:
        """What serves while the file cannot be read: its last good objects, or, before any, nothing."""
        return "keeping its last good objects" if self.loaded else "nothing from it is served (it never loaded)"


def bundled_examples() -> Path:
    return Path(__file__).resolve().parent.parent / "examples"


def expand(paths: list[Path]) -> list[Path]:
    """Files named by `paths` (a directory contributes its *.yaml/*.yml/*.json, not hidden)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(
                sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and not p.name.startswith(".") and p.is_file())
            )
        elif path.is_file():
            files.append(path)
        else:
            raise ManifestError(f"{path}: no such file or directory")
    return files


def read_documents(path: Path) -> Iterator[tuple[str, Any]]:
    """(position, raw object) for every object in the file, one at a time; `kind: List` is flattened.

    Objects are decoded as they are asked for, so the caller converts each and drops its raw
    dict before the next is built: a file of 50k imports never holds all its raw objects at
    once (they cost several times the records they become, and the memory they fragment
    stays with the process). Raises OSError, UnicodeDecodeError or yaml.YAMLError for the
    whole file, possibly after some objects were yielded: the caller keeps nothing of a file
    that fails.
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        items = _json_list_items(text)
        if items is not None:  # one `kind: List` document: its items decoded one by one
            for j, item in enumerate(items, 1):
                yield f"document 1 item {j}", decode.loads(item)
            return
    docs: Iterable[Any] | None = None
    if path.suffix == ".json":  # the json module reads JSON far faster than YAML, in a fraction of the memory
        try:
            docs = [json.loads(text)]
        except ValueError:
            docs = None  # not strict JSON: YAML (a superset) reads it or reports the error
    if docs is None:
        docs = yaml.load_all(text, Loader=_Loader)
    for i, doc in enumerate(docs, 1):
        if doc is None:
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc.get("items") or []
            if not isinstance(items, list):
                yield f"document {i}", doc
                continue
            for j, item in enumerate(items, 1):
                yield f"document {i} item {j}", item
        else:
            yield f"document {i}", doc


class _JsonList(msgspec.Struct):
    """A JSON `kind: List` document with its items left undecoded (pieces of the file's text)."""

    kind: Any = msgspec.UNSET
    items: list[msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET


_JSON_LIST = msgspec.json.Decoder(_JsonList)


def _json_list_items(data: str) -> list[msgspec.Raw] | None:
    """The items of a JSON `kind: List` as undecoded pieces, or None for any other file (the caller reads it whole)."""
    try:
        top = _JSON_LIST.decode(data)
    except msgspec.DecodeError:  # not an object, items not a list, or JSON only the json module reads (NaN)
        return None
    if not (isinstance(top.kind, str) and top.kind.endswith("List")) or top.items is msgspec.UNSET:
        return None
    return top.items


def object_id(raw: Any) -> tuple[str, str, str] | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("metadata"), dict):
        return None
    meta = raw["metadata"]
    return (str(raw.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


class ManifestSource:
    """Loads files into the store and keeps them in sync with the disk."""

    def __init__(self, paths: list[Path], store: Store, on_error=None, on_sync=None) -> None:
        self.paths = paths
        self.store = store
        self.files: dict[Path, FileState] = {}
        self.on_error = on_error or (lambda reason: None)  # metrics hook: rejected objects by reason
        # metrics hook (mcsdns_seconds_since_last_sync): called after a load that found every file as it is on
        # disk read and valid, so the gauge grows while a broken edit keeps the last good state in service.
        self.on_sync = on_sync or (lambda: None)
        # Synced once every file has been read: until then /ready is 503 naming the file, and NXDOMAIN is
        # SERVFAIL (decision 10), rather than a ready server with an empty zone. Once synced, a bad edit
        # only keeps the last good objects: every replica reads the same files, none may turn unready.
        self._synced_once = False

    def load(self) -> None:
        """Read every file whose stamp changed and publish the union to the store."""
        current_state = True  # every file found, stat'ed and read as it is now
        try:
            current = expand(self.paths)
        except (ManifestError, OSError) as exc:
            log.error("manifests: %s; keeping the last good state", exc)
            current = list(self.files)
            current_state = False
        changed = False
        for path in current:
            state = self.files.setdefault(path, FileState())
            try:
                st = path.stat()
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError as exc:
                state.problem = f"cannot stat ({exc.strerror or exc})"
                log.error("%s: %s; %s", path, state.problem, state.keeping())
                current_state = False
                continue
            if stamp == state.stamp:
                continue
            state.stamp = stamp
            changed |= self._read(path, state)
        for gone in [p for p in self.files if p not in current]:
            log.info("%s: removed; its objects are withdrawn", gone)
            del self.files[gone]
            changed = True
        if changed or not self.store.synced_all:
            self._publish()
        if current_state and all(state.loaded and not state.problem for state in self.files.values()):
            self.on_sync()

    def _read(self, path: Path, state: FileState) -> bool:
        """Convert the file's objects as they are decoded; a file that fails anywhere changes nothing.

        What the objects have to report (skipped kinds, omissions, rejections) is held until the
        whole file has been read, so a file that turns out unreadable or invalid further on
        reports only that, as if it were parsed whole before converting.
        """
        objects: list[Object] = []
        invalid: set[tuple[str, str, str]] = set()
        reasons: dict[tuple[str, str, str], str] = {}
        reports: list[Callable[[], None]] = []
        try:
            for position, raw in read_documents(path):
                kind = raw.get("kind") if isinstance(raw, dict) else None
                if not isinstance(kind, str) or kind not in KINDS:
                    reports.append(partial(log.info, "%s %s: skipping %s (mcsdns reads ServiceImport, EndpointSlice, Namespace)",
                                           path, position, object_ref(raw)))  # fmt: skip
                    continue
                try:
                    obj = convert(raw)
                    objects.append(obj)
                    if getattr(obj, "omitted", ()):
                        reports.append(partial(report_omitted, f"{path} {position}: {object_ref(raw)}", obj.omitted, self.on_error))
                    if isinstance(obj, ServiceImport) and obj.status.notes:
                        reports.append(partial(report_status_notes, f"{path} {position}: {object_ref(raw)}", obj.status.notes))
                except InvalidObject as exc:
                    reports.append(partial(log.error, "%s %s: %s rejected: %s", path, position, object_ref(raw), exc))
                    reports.append(partial(self.on_error, _reason(exc)))
                    oid = object_id(raw)
                    if oid is not None:
                        invalid.add(oid)
                        reasons[oid] = str(exc)
        except (OSError, UnicodeDecodeError) as exc:
            state.problem = f"cannot read ({getattr(exc, 'strerror', None) or exc})"
            log.error("%s: %s; %s", path, state.problem, state.keeping())
            self.on_error("unreadable_file")
            return False
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            state.problem = f"invalid YAML/JSON{where}: {_problem(exc)}"
            log.error("%s: invalid YAML/JSON%s: %s; %s", path, where, _one_line(exc), state.keeping())
            self.on_error("invalid_yaml")
            return False
        for report in reports:
            report()
        state.objects, state.invalid, state.reasons = objects, invalid, reasons
        state.loaded, state.problem = True, ""
        log.info("%s: loaded %d objects (%d rejected)", path, len(objects), len(invalid))
        return True

    def _publish(self) -> None:
        by_kind: dict[str, list[Object]] = {k: [] for k in KINDS}
        keep: dict[str, set[tuple[str, str]]] = {k: set() for k in KINDS}
        namespaces: set[str] = set()
        for state in self.files.values():
            for obj in state.objects:
                kind = type(obj).__name__
                by_kind[kind].append(obj)
                namespace = obj.name if isinstance(obj, Namespace) else obj.namespace
                if namespace:  # a ClusterProperty is cluster-scoped
                    namespaces.add(namespace)
            for kind, ns, name in state.invalid:
                if kind in keep:
                    keep[kind].add((ns, name) if kind != "Namespace" else ("", name))
                if ns:
                    namespaces.add(ns)
        by_kind["Namespace"] = [Namespace(n) for n in sorted(namespaces)]
        complete = self._synced_once or all(state.loaded for state in self.files.values())
        # Namespaces first so services appear exposed; imports before slices, like a sync.
        for kind in ("Namespace", "ClusterProperty", "ServiceImport", "EndpointSlice"):
            Relist(self.store, kind).finish(by_kind[kind], keep[kind])
            if complete:
                self.store.mark_synced(kind)
        self._synced_once = complete

    def rejections(self) -> list[tuple[str, str, str, str]]:
        """(kind, namespace, name, reason) of every object the files hold that was rejected, and
        ("File", "", path, reason) of every file whose last read failed, with what serves meanwhile."""
        files = [("File", "", str(path), f"{state.problem}; {state.keeping()}")
                 for path, state in self.files.items() if state.problem]
        return files + [(*oid, reason) for state in self.files.values() for oid, reason in state.reasons.items()]

    def status(self) -> str:
        """Why the source is not synced (for /ready): the files never read successfully."""
        broken = [f"{path}: {state.problem or 'not read yet'}" for path, state in self.files.items() if not state.loaded]
        return "manifests not loaded: " + "; ".join(broken) if broken else "manifests not loaded yet"

    async def run(self, stop: asyncio.Event) -> None:
        """Poll the files until `stop` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), POLL_SECONDS)
            except asyncio.TimeoutError:
                pass
            if not stop.is_set():
                try:
                    self.load()
                except Exception:  # never let a poll kill the source
                    log.exception("manifests: reload failed; keeping the last good state")

    def reload(self) -> None:
        """Re-read every file now (SIGHUP)."""
        for state in self.files.values():
            state.stamp = None
        self.load()


def _reason(exc: InvalidObject) -> str:
    return reason_of(str(exc))


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _problem(exc: yaml.YAMLError) -> str:
    """The parser's reason without its position and excerpt (the line is given beside it), e.g. `mapping
    values are not allowed here`; the whole message when it has no separate reason."""
    return str(getattr(exc, "problem", None) or "") or _one_line(exc)


def default_paths() -> list[Path]:
    return [bundled_examples()]


