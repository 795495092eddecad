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
cache=${MCSDNS_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcsdns/testbin}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
export CGO_ENABLED=0

# shellcheck source=lib.sh
. "$here/lib.sh"

bin="$cache/bin"
mkdir -p "$bin"

LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v1.34.4 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"
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
