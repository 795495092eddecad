"""A manifests file that changes step by step: services created, updated and deleted.

The file holds a base (the bundled example, say) plus the services the steps made. Each step
rewrites it and names one question that shows the step and the answer it must get, so a test
waits for mcsdns (after SIGHUP) and for whatever follows mcsdns (a secondary) to answer it.
The steps cycle through: a ClusterSetIP import created; a headless import created with two
named endpoints; both of those updated (the import's IP changed, one endpoint replaced); the
ClusterSetIP import deleted.
"""

from __future__ import annotations

from pathlib import Path

ZONE = "clusterset.local."


def clusterset_ip(name: str, ip: str) -> str:
    return ("---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
            f"metadata: {{name: {name}, namespace: demo}}\n"
            f"spec: {{type: ClusterSetIP, ips: [{ip}], ports: [{{name: http, protocol: TCP, port: 80}}]}}\n")


def headless(name: str, endpoints: list[tuple[str, str]]) -> str:
    """A headless import and one slice of cluster `east` with (hostname, address) endpoints."""
    eps = ", ".join(f"{{addresses: [{a}], hostname: {h}, conditions: {{ready: true}}}}" for h, a in endpoints)
    return ("---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
            f"metadata: {{name: {name}, namespace: demo}}\n"
            "spec: {type: Headless, ports: [{name: http, protocol: TCP, port: 80}]}\n"
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
            f"metadata: {{name: {name}-east, namespace: demo, labels: "
            f"{{multicluster.kubernetes.io/service-name: {name}, multicluster.kubernetes.io/source-cluster: east}}}}\n"
            f"addressType: IPv4\nendpoints: [{eps}]\nports: [{{name: http, protocol: TCP, port: 8080}}]\n")


class Churn:
    """The file at `path`: `base` plus the services the steps so far made (see the module docstring)."""

    def __init__(self, path: Path, base: str) -> None:
        self.path = path
        self.base = base
        self.services: dict[str, str] = {}  # name -> its manifests
        self.steps = 0
        self.write()

    def write(self) -> None:
        self.path.write_text(self.base + "\n" + "".join(self.services[n] for n in sorted(self.services)))

    def step(self) -> tuple[str, set[str] | None]:
        """Make the next change and write the file; returns (a name, the A addresses it must answer,
        None: NXDOMAIN)."""
        i, self.steps = self.steps, self.steps + 1
        cycle, kind = divmod(i, 4)
        c, h = f"c{cycle}", f"h{cycle}"
        if kind == 0:
            ip = f"10.77.{cycle % 250}.1"
            self.services[c] = clusterset_ip(c, ip)
            result: tuple[str, set[str] | None] = (c, {ip})
        elif kind == 1:
            self.services[h] = headless(h, [(f"{h}-0", f"10.78.{cycle % 250}.1"), (f"{h}-1", f"10.78.{cycle % 250}.2")])
            result = (h, {f"10.78.{cycle % 250}.1", f"10.78.{cycle % 250}.2"})
        elif kind == 2:
            self.services[c] = clusterset_ip(c, f"10.77.{cycle % 250}.2")
            self.services[h] = headless(h, [(f"{h}-0", f"10.78.{cycle % 250}.1"), (f"{h}-2", f"10.78.{cycle % 250}.3")])
            result = (h, {f"10.78.{cycle % 250}.1", f"10.78.{cycle % 250}.3"})
        else:
            del self.services[c]
            result = (c, None)
        self.write()
        return f"{result[0]}.demo.svc.{ZONE}", result[1]
