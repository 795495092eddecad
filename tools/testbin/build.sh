#!/usr/bin/env bash
# Build the real parts the tests run beside mcsdns -- kube-apiserver, etcd, kubectl,
# a trimmed CoreDNS and helm -- from the Go module proxy into a cache outside the checkout,
# and fetch the ServiceImport CRDs from the sigs.k8s.io/mcs-api module.
#
# Prints the bin directory on its last line. Binaries are cached by the hash of
# each wrapper module (go.mod, go.sum, sources), so a warm run takes seconds.
# Nothing built here is ever committed (testsupport/testbed.py explains the test bed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

LDFLAGS=$(kube_ldflags "$here/kube")
kube=$(build_module "$here/kube" "$cache/kube" \
    k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver \
    k8s.io/kubernetes/cmd/kubectl=kubectl \
    go.etcd.io/etcd/server/v3=etcd)
LDFLAGS="-s -w"
coredns=$(build_module "$here/coredns" "$cache/coredns" .=coredns)
# As helm's Makefile links it: its version, and the Kubernetes version `helm lint`/`helm template`
# assume (else 1.20, older than the chart's kubeVersion).
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=v3.19.5"
for pkg in pkg/chartutil pkg/lint/rules; do
    LDFLAGS="$LDFLAGS -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=34"
done
helm=$(build_module "$here/helm" "$cache/helm" helm.sh/helm/v3/cmd/helm=helm)

ln -sf "$kube/kube-apiserver" "$bin/kube-apiserver"
ln -sf "$kube/etcd" "$bin/etcd"
ln -sf "$kube/kubectl" "$bin/kubectl"
ln -sf "$coredns/coredns" "$bin/coredns"
ln -sf "$helm/helm" "$bin/helm"

# ServiceImport CRDs: v0.5.0 serves v1beta1 (storage) and v1alpha1; v0.4.1 serves
# only v1alpha1 -- the tests install one or the other to exercise discovery.
crd=config/crd/multicluster.x-k8s.io_serviceimports.yaml
for v in v0.5.0 v0.4.1; do
    target="$cache/crds/$v/serviceimports.yaml"
    if [ ! -f "$target" ]; then
        mkdir -p "$(dirname "$target")"
        dir=$(cd "$here/kube" && go mod download -json "sigs.k8s.io/mcs-api@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        cp "$dir/$crd" "$target.tmp" && chmod 644 "$target.tmp" && mv "$target.tmp" "$target"
    fi
done

"$bin/kube-apiserver" --version >&2
"$bin/etcd" --version 2>&1 | sed -n 1p >&2
"$bin/coredns" -version 2>&1 | sed -n 1p >&2
"$bin/helm" version --short >&2
echo "$cache"
