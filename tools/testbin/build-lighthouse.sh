#!/usr/bin/env bash
# Build Submariner Lighthouse's agent (github.com/submariner-io/lighthouse v0.20.0,
# pkg/agent) from the Go module proxy into the testbin cache, for
# testsupport/lighthouse.py: a real MCS implementation exporting Services to the
# one-node cluster. The wrapper module lighthouse/ pins it; the binary is cached by
# that module's hash (lib.sh build_module), so a warm run takes seconds.
#
# Prints the cache directory on its last line; build-images.sh then wraps the
# binary in the image localhost/lighthouse-agent:dev.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

version=$(sed -n 's/^require github\.com\/submariner-io\/lighthouse \(v[0-9.]*\)$/\1/p' "$here/lighthouse/go.mod")
[ -n "$version" ] || { echo "build-lighthouse.sh: lighthouse/go.mod requires no lighthouse release" >&2; exit 1; }
# As Lighthouse's Makefile stamps it: the agent logs its version at start.
LDFLAGS="-s -w -X main.version=$version"
agent=$(build_module "$here/lighthouse" "$cache/lighthouse" \
    github.com/submariner-io/lighthouse/pkg/agent=lighthouse-agent)
ln -sf "$agent/lighthouse-agent" "$bin/lighthouse-agent"

# The ServiceExport CRD the agent watches, from the mcs-api release whose ServiceImport CRD
# build.sh installs (v0.5.0: v1alpha1 and v1beta1 served; Lighthouse writes v1alpha1).
target="$cache/crds/v0.5.0/serviceexports.yaml"
if [ ! -f "$target" ]; then
    mkdir -p "$(dirname "$target")"
    dir=$(cd "$here/kube" && go mod download -json sigs.k8s.io/mcs-api@v0.5.0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    cp "$dir/config/crd/multicluster.x-k8s.io_serviceexports.yaml" "$target.tmp" && chmod 644 "$target.tmp" && mv "$target.tmp" "$target"
fi

"$bin/lighthouse-agent" -version 2>&1 | tail -n 1 >&2
echo "$cache"
