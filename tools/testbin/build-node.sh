#!/usr/bin/env bash
# Build what a one-node cluster adds to the test bed (testsupport/cluster.py):
# kubelet, kube-proxy, kube-controller-manager and kube-scheduler from the Go
# module proxy, and a static pause binary for the sandbox image. Cached outside
# the checkout like build.sh's binaries, in a wrapper module of its own (node/)
# so the kube-apiserver/etcd module's hash -- and its cache -- never change.
#
# Prints the cache directory on its last line. Run tools/testbin/build.sh first
# (same cache); tools/testbin/build-images.sh then makes the images.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

LDFLAGS=$(kube_ldflags "$here/node")
node=$(build_module "$here/node" "$cache/node" \
    k8s.io/kubernetes/cmd/kubelet=kubelet \
    k8s.io/kubernetes/cmd/kube-proxy=kube-proxy \
    k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler)
LDFLAGS="-s -w"
pause=$(build_module "$here/pause" "$cache/pause" .=pause)

for name in kubelet kube-proxy kube-controller-manager kube-scheduler; do
    ln -sf "$node/$name" "$bin/$name"
done
ln -sf "$pause/pause" "$bin/pause"

"$bin/kubelet" --version >&2
echo "$cache"
