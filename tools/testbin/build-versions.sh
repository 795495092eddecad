#!/usr/bin/env bash
# Build the version matrix: one kube-apiserver per supported Kubernetes minor, each from its
# own wrapper module (kube-<minor>/, so the default testbin's hash and cache never change),
# into <cache>/versions/<minor>/ -- a complete testbin usable as MCSDNS_TESTBIN_CACHE=<that dir>
# (tests/test_versions.py runs the API-source tests against each). Everything else in that
# testbin (etcd, kubectl, CoreDNS, helm, the CRDs) is the default testbin's: run build.sh
# first. Cached by the wrapper module's hash like the rest, so a warm run takes seconds.
#
# Usage: build-versions.sh [MINOR...]   (default: every kube-<minor>/ module here)
# Prints the versions directory on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

for part in etcd kubectl coredns helm; do
    [ -x "$bin/$part" ] || { echo "build-versions.sh: $bin/$part is missing: run tools/testbin/build.sh first" >&2; exit 1; }
done

if [ $# -eq 0 ]; then
    set -- $(cd "$here" && ls -d kube-1.* | sed 's/^kube-//' | sort -V)
fi
for minor in "$@"; do
    dir="$here/kube-$minor"
    [ -f "$dir/go.mod" ] || { echo "build-versions.sh: no wrapper module $dir" >&2; exit 1; }
    LDFLAGS=$(kube_ldflags "$dir")  # the patch release the wrapper module requires
    version=${LDFLAGS#*gitVersion=}; version=${version%% *}
    start=$SECONDS
    built=$(build_module "$dir" "$cache/versions/build/$minor" k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver)
    echo "kube-apiserver $version: $((SECONDS - start)) s" >&2
    target="$cache/versions/$minor"
    mkdir -p "$target/bin"
    ln -sfn "$cache/crds" "$target/crds"
    for part in etcd kubectl coredns helm; do
        ln -sf "$(readlink -f "$bin/$part")" "$target/bin/$part"
    done
    ln -sf "$built/kube-apiserver" "$target/bin/kube-apiserver"
    "$target/bin/kube-apiserver" --version >&2
done
echo "$cache/versions"
