"""`mcsdns imports` and `mcsdns explain`: the admin API's /imports and /explain, for people.

A thin HTTP client of a running server (default the local admin address;
`kubectl port-forward pod/<mcsdns> 9153` makes a pod's the local one). It
prints what the server says and computes nothing about the zone itself.
Exit codes: 0 printed, 1 the server could not be asked (or said no) or, for `imports`, has not synced
its source (nothing, or not everything, is loaded: the list printed is incomplete), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from typing import Any

DEFAULT_SERVER = "http://127.0.0.1:9153"
TIMEOUT = 5.0
VIA_TIMEOUT = 10.0  # /explain with `via` waits up to 3 s for the other DNS server


class ClientError(Exception):
    """The server could not be asked, or refused the question; the message says which."""


def fetch(server: str, path: str, params: dict[str, str] | None = None, timeout: float = TIMEOUT) -> dict:
    """GET `server``path`?params and decode its JSON; ClientError with a readable reason otherwise."""
    import urllib.error  # here, not at the top: `mcsdns serve` imports this module for its parser only
    import urllib.request

    base = server if "://" in server else f"http://{server}"
    url = base.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        raise ClientError(f"{url}: HTTP {e.code}: {str(detail).strip()}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ClientError(f"cannot reach the mcsdns admin server at {base} ({reason}); is `mcsdns serve` running "
                          "there (--http-listen), or a `kubectl port-forward` to it? Use --server URL") from None
    try:
        return json.loads(body)
    except ValueError:
        raise ClientError(f"{url}: the reply is not JSON (is {base} an mcsdns admin address?)") from None


# --------------------------------------------------------------------------- formatting


def _ports(entry: dict) -> str:
    return ",".join(f"{p['port']}/{p['protocol'] or '-'}" + (f"({p['name']})" if p["name"] else "") for p in entry["ports"]) or "<none>"


def _clusters(entry: dict) -> tuple[str, str]:
    clusters = entry["clusters"]
    names = ",".join(c or "<no-label>" for c in clusters) or "<none>"
    ready = sum(c["ready"] for c in clusters.values())
    total = ready + sum(c["not_ready"] for c in clusters.values())
    return names, f"{ready}/{total}"


def imports_table(doc: dict) -> str:
    """kubectl-style columns: NAMESPACE NAME TYPE IPS PORTS CLUSTERS READY [NOT-READY], then the rejected objects.

    READY counts ready addresses. NOT-READY, shown when some import's own Ready condition is not True,
    is that condition's reason (empty for the others): status, never a cause of any answer."""
    rows = [("NAMESPACE", "NAME", "TYPE", "IPS", "PORTS", "CLUSTERS", "READY")]
    for e in doc["imports"]:
        rows.append((e["namespace"], e["name"], e["type"], ",".join(e["ips"]) or "<none>", _ports(e), *_clusters(e)))
    if any(e.get("not_ready") for e in doc["imports"]):
        rows = [rows[0] + ("NOT-READY",)] + [row + ((e.get("not_ready") or "").split(":", 1)[0],)
                                              for row, e in zip(rows[1:], doc["imports"])]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    if len(rows) == 1:
        lines = ["No ServiceImports."]
    if not doc.get("synced", True):
        lines.append(f"(not synced yet: {doc.get('not_synced') or 'the list may be incomplete'})")
    for r in doc.get("rejected", []):
        ref = f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"]
        lines.append(f"rejected: {r['kind']} {ref}: {r['reason']}")
    return "\n".join(lines)


def explain_text(doc: dict) -> str:
    rcode = doc["rcode"] or "forwarded (outside the zones served here)"
    lines = [f"{doc['name']} {doc['type']}: {rcode}", doc["reason"]]
    lines += doc["answer"]
    via = doc.get("via")
    if via:
        lines.append(f"via {via['server']}: {via['rcode'] or 'no answer'} ({via['verdict']})")
        lines.append(via["reason"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- commands


def add_parsers(sub: Any) -> None:
    """The `imports` and `explain` subcommands (argparse subparsers of the mcsdns parser)."""
    server_help = f"admin address of the mcsdns to ask (its --http-listen; default {DEFAULT_SERVER})"
    p = sub.add_parser("imports", help="list the ServiceImports a running server knows (its /imports)",
                       description="List what a running mcsdns serves: one row per ServiceImport, then the objects "
                       "it rejected and why. Asks the server's admin endpoint /imports.")
    p.add_argument("--server", metavar="URL", default=DEFAULT_SERVER, help=server_help)
    p.add_argument("-n", "--namespace", metavar="NS", default=None, help="only the imports of this namespace")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="table (default) or json")
    p.set_defaults(run=run_imports)
    e = sub.add_parser("explain", help="why a name answers what it answers (the server's /explain)",
                       description="Ask a running mcsdns one question and print its rcode, why, and the records. "
                       "The rcode and records are the server's real DNS reply. Then, when the server runs in a pod "
                       "(or with --via), the same question goes to the cluster's DNS, and a last line says whether "
                       "the name reaches mcsdns from pods, and the fix when it does not (the stub zone).")
    e.add_argument("name", metavar="NAME", help="e.g. web.demo.svc.clusterset.local")
    e.add_argument("type", metavar="TYPE", nargs="?", default="A", help="query type (default A)")
    e.add_argument("--server", metavar="URL", default=DEFAULT_SERVER, help=server_help)
    e.add_argument("--via", metavar="ADDR", default="auto",
                   help="also ask this DNS server and say whether it brings the name to mcsdns: `cluster` (the first "
                   "nameserver of the mcsdns server's /etc/resolv.conf: in its pod, the cluster DNS every pod asks), "
                   "`auto` (default: `cluster` when the server runs in a pod, else `none`), HOST[:PORT], or `none`")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    e.set_defaults(run=run_explain)


def run_imports(args: argparse.Namespace) -> int:
    try:
        doc = fetch(args.server, "/imports", {"namespace": args.namespace} if args.namespace else None)
    except ClientError as exc:
        print(f"mcsdns imports: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.output == "json" else imports_table(doc))
    if not doc.get("synced", True):  # nothing, or not all, is loaded: a script must not take the list as complete
        print(f"mcsdns imports: the server is not synced: {doc.get('not_synced') or 'initial list not complete'}",
              file=sys.stderr)
        return 1
    return 0


def run_explain(args: argparse.Namespace) -> int:
    try:
        doc = fetch(args.server, "/explain", {"name": args.name, "type": args.type, "via": args.via},
                    timeout=VIA_TIMEOUT)
    except ClientError as exc:
        print(f"mcsdns explain: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.output == "json" else explain_text(doc))
    return 0
