#!/usr/bin/env bash
# Build the container images of testsupport/cluster.py's one-node cluster with
# buildah, without any registry (none is reachable from the test machines):
#
#   localhost/pause:dev      the sandbox image, from build-node.sh's static pause
#   localhost/coredns:dev    the cluster DNS, from build.sh's CoreDNS binary
#   localhost/dnsutils:dev   a client pod with dig and kdig (Debian bookworm)
#   localhost/knot:dev       knotd, knotc and kdig (Debian bookworm's knot and knot-dnsutils), for
#                            deploy/examples/knot-secondary.yaml (its follower asks mcsdns pods with kdig)
#   localhost/mcsdns:dev     the project's own Containerfile, with BASE set to a
#                            Debian bookworm + python3 made here by mmdebstrap in
#                            place of the unreachable python:3.12-slim
#   localhost/lighthouse-agent:dev  Submariner Lighthouse's agent, from build-lighthouse.sh's
#                            static binary (only when it was built: testsupport/lighthouse.py
#                            imports it into the node itself)
#
# Each lands as an OCI archive in $cache/images/NAME-HASH.tar (HASH covers the
# image's inputs, so a changed binary, package list or source tree rebuilds it)
# with NAME.tar linking the current one; cluster.py imports those into
# containerd. Needs root, buildah and mmdebstrap. Prints the images dir last.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${MCSDNS_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcsdns/testbin}
bin="$cache/bin"
for name in pause coredns; do
    [ -x "$bin/$name" ] || { echo "$bin/$name is missing: run tools/testbin/build.sh and build-node.sh first" >&2; exit 1; }
done
# shellcheck source=images.sh
. "$here/images.sh"

from_binary() {  # from_binary NAME: a scratch image holding one static binary as its entrypoint
    local name=$1 h c
    h=$(sha256sum "$bin/$name" | cut -c1-16)
    fresh "$name" "$h" && return
    c=$(buildah from scratch)
    buildah copy -q "$c" "$bin/$name" "/$name" >/dev/null
    buildah config --entrypoint "[\"/$name\"]" "$c"
    commit "$c" "$name" "localhost/$name:dev" "$h"
}

from_binary pause
from_binary coredns
if [ -x "$bin/lighthouse-agent" ]; then
    from_binary lighthouse-agent
fi
debian dnsutils localhost/dnsutils:dev "bind9-dnsutils,knot-dnsutils" "sleep infinity"
debian knot localhost/knot:dev "knot,knot-dnsutils" "knotd"
debian mcsdns-base localhost/mcsdns-base:dev "python3,python3-venv,python-is-python3,passwd" "python"

# The project's own Containerfile on that base; rebuilt when it or the package changes.
h=$( (cd "$repo" && sha256sum Containerfile pyproject.toml README.md deploy/base/mcsdns.flags "$out/mcsdns-base.tar" \
        $(find mcsdns -type f -not -name '*.pyc' | sort)) | sha256sum | cut -c1-16)
if ! fresh mcsdns "$h"; then
    base=localhost/mcsdns-base:dev
    buildah pull -q "oci-archive:$out/mcsdns-base.tar" >/dev/null
    # The host's pip configuration and CA bundle, read-only and only while building (not in the
    # image): pip then reaches PyPI the way the host's pip does (e.g. through a TLS proxy).
    mounts=()
    for f in /etc/pip.conf /etc/ssl/certs/ca-certificates.crt; do
        if [ -f "$f" ]; then mounts+=(-v "$f:$f:ro"); fi
    done
    buildah bud -q --isolation=chroot --layers=false --build-arg "BASE=$base" "${mounts[@]}" \
        -f "$repo/Containerfile" -t localhost/mcsdns:dev "$repo" >/dev/null
    buildah push -q localhost/mcsdns:dev "oci-archive:$out/mcsdns-$h.tar.tmp:localhost/mcsdns:dev"
    buildah rmi localhost/mcsdns:dev "$base" >/dev/null
    landed mcsdns "$h" localhost/mcsdns:dev
fi
echo "$out"
