"""Zone transfers as deployed: the Helm chart's `transfers.tsigSecret` and deploy/components/transfers.

Each renders (the real helm, the real kubectl kustomize) a Secret volume at /etc/mcsdns-tsig and
`--tsig-key-file` pointing into it; then the Deployment's own command runs with the rendered flags
and arguments (only the key's path is this test's copy of the Secret, as the mount would place it),
and a signed AXFR transfers the zone while an unsigned one is REFUSED.
"""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.tsig
import dns.zone

from test_deploy import served_command, with_component
from test_helm import by_kind, parse_flags, render
from testsupport.mcsdnsserver import McsdnsServer

ZONE = "clusterset.local."
MOUNTED = "/etc/mcsdns-tsig/tsig.key"
SECRET = base64.b64encode(bytes(range(7, 39))).decode()
KEYRING = {dns.name.from_text("xfr-key."): dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")}


def serve_and_transfer(command: list[str], flags: list[str], args: list[str], tmp: Path) -> None:
    """Run the Deployment's command as the pod would, the key at a local path; check transfers."""
    key = tmp / "tsig.key"
    key.write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    dropped = ("--listen", "--http-listen", "--lameduck")
    flags_file = tmp / "flags"
    flags_file.write_text(shlex.join(f for f in flags if f.split("=", 1)[0] not in dropped) + "\n")
    server = McsdnsServer()
    local = [a.replace(MOUNTED, str(key)) for a in args]
    server.argv = served_command(command, flags_file, *local, f"--listen=127.0.0.1:{server.dns_port}",
                                 f"--http-listen=127.0.0.1:{server.http_port}", "--lameduck=0")
    with server:
        zone = dns.zone.Zone(ZONE, relativize=False)
        query = dns.message.make_query(ZONE, "AXFR")
        query.use_tsig(KEYRING, "xfr-key.")
        dns.query.inbound_xfr("127.0.0.1", zone, query, port=server.dns_port, timeout=10)
        assert zone.get_rdataset(f"web.demo.svc.{ZONE}", "A")[0].address == "10.96.10.10"
        unsigned = dns.query.tcp(dns.message.make_query(ZONE, "AXFR"), "127.0.0.1", port=server.dns_port, timeout=5)
        assert unsigned.rcode() == dns.rcode.REFUSED


def test_helm_tsig_secret(tmp_path: Path) -> None:
    objects = by_kind(render(tmp_path, {"flags": ["--transfer-to=127.0.0.1", "--upstream=none"],
                                        "transfers": {"tsigSecret": "my-tsig"}}))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "tsig", "secret": {"secretName": "my-tsig"}} in pod["volumes"]
    assert {"name": "tsig", "mountPath": "/etc/mcsdns-tsig", "readOnly": True} in container["volumeMounts"]
    flags = parse_flags(objects["ConfigMap"]["data"]["flags"])
    assert f"--tsig-key-file={MOUNTED}" in flags
    default = by_kind(render(tmp_path))
    assert [o["metadata"]["name"] for o in render(tmp_path) if o["kind"] == "Service"] == ["mcsdns"]
    assert "tsig" not in str(default["Deployment"]) and "--tsig-key-file" not in default["ConfigMap"]["data"]["flags"]
    serve_and_transfer(container["command"], [f.replace(MOUNTED, str(tmp_path / "tsig.key")) for f in flags], [], tmp_path)


def assert_primaries(primaries: dict, service: dict) -> None:
    """Headless, over the same pods as the mcsdns Service, DNS over TCP only (zone transfers)."""
    assert primaries["spec"]["clusterIP"] == "None"
    assert primaries["spec"]["selector"] == service["spec"]["selector"]
    assert [(p["port"], p["protocol"], p["targetPort"]) for p in primaries["spec"]["ports"]] == [(53, "TCP", "dns-tcp")]


def test_helm_primaries_service(tmp_path: Path) -> None:
    """transfers.primariesService: the pods' own addresses, headless, as the kustomize component's."""
    rendered = render(tmp_path, {"transfers": {"primariesService": True}})
    services = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Service"}
    assert_primaries(services.pop("mcsdns-primaries"), services["mcsdns"])


def test_kustomize_transfers_component(tmp_path: Path) -> None:
    rendered = with_component("transfers", tmp_path)
    services = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Service"}
    # The pods' own addresses for secondaries (each replica has its own serials): the same pods, headless.
    primaries = services.pop("mcsdns-primaries")
    assert_primaries(primaries, services["mcsdns"])
    objects = by_kind([o for o in rendered if o is not primaries])
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "tsig", "secret": {"secretName": "mcsdns-tsig"}} in pod["volumes"]
    assert {"name": "tsig", "mountPath": "/etc/mcsdns-tsig", "readOnly": True} in container["volumeMounts"]
    assert container["args"] == [f"--tsig-key-file={MOUNTED}"]
    flags = parse_flags(objects["ConfigMap"]["data"]["flags"]) + ["--transfer-to=127.0.0.1"]  # what the user adds
    serve_and_transfer(container["command"], flags, container["args"], tmp_path)


def test_kustomize_primaries_component_alone_adds_the_service_and_no_key(tmp_path: Path) -> None:
    """deploy/components/primaries: the headless Service for secondaries that cannot sign (a CoreDNS
    `secondary` followed by `mcsdns follow-primary`), the Deployment as the base has it (no TSIG)."""
    rendered = with_component("primaries", tmp_path)
    services = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Service"}
    assert_primaries(services.pop("mcsdns-primaries"), services["mcsdns"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert "tsig" not in {v["name"] for v in pod["volumes"]}
    assert "args" not in pod["containers"][0]
