#!/usr/bin/env bash
# Build what `python3 -m testsupport.conformance` runs (testsupport/conformance.py): the
# SIG-Multicluster conformance suite and the reference import-side controller, from the
# mcs-api snapshot in ../shared/upstream/ (the Go module proxy does not serve those two
# nested modules; everything they import comes from the proxy), and the images the
# suite's pods and the controller run in the one-node cluster.
#
#   $cache/conformance/HASH/mcs-conformance.test   `go test -c` of mcs-api/conformance
#   $cache/conformance/HASH/servicecontroller      mcs-api/controllers/cmd/servicecontroller
#   $cache/conformance/HASH/crd/*.yaml             ServiceExport and ServiceImport CRDs
#   $cache/images/socat.tar        docker.io/alpine/socat:1.7.4.4 \  stand-ins built from Debian
#   $cache/images/netshoot.tar     docker.io/nicolaka/netshoot:v0.15 / packages (no registry here)
#   $cache/images/mcs-controller.tar  localhost/mcs-controller:dev (the controller, scratch)
#
# The snapshot is extracted into the cache (never into the checkout) after its sha256 is
# checked; HASH covers that sha256, the Go version and the build commands, so a warm run takes
# seconds. The snapshot is found in ../shared/upstream/ beside the checkout (or beside the main
# worktree of a git worktree), or where $MCSDNS_UPSTREAM_DIR says. Needs Go, root, buildah and
# mmdebstrap. Prints the conformance directory on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

snapshot=mcs-api-ded161a.tar.gz
sha=d079738bfe9f996b35d53bfa724e5a708c49d2e1b910def9e67bb3fd15f5aa47

find_snapshot() {
    local dirs=() main
    [ -n "${MCSDNS_UPSTREAM_DIR:-}" ] && dirs+=("$MCSDNS_UPSTREAM_DIR")
    dirs+=("$repo/../shared/upstream")
    # A git worktree: the shared directory sits beside the main checkout.
    if main=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        dirs+=("$(dirname "$main")/../shared/upstream")
    fi
    for d in "${dirs[@]}"; do
        if [ -f "$d/$snapshot" ]; then echo "$d/$snapshot"; return; fi
    done
    echo "build-conformance.sh: $snapshot not found in: ${dirs[*]} (set MCSDNS_UPSTREAM_DIR)" >&2
    return 1
}

tarball=$(find_snapshot)
# The binaries' inputs: the snapshot, the Go toolchain and the two build commands below.
build_suite=(go test -c -trimpath -ldflags "-s -w")
build_controller=(go build -trimpath -ldflags "-s -w")
h=$(printf '%s\n' "$sha" "$(go version)" "${build_suite[*]}" "${build_controller[*]}" | sha256sum | cut -c1-16)
dest="$cache/conformance/$h"
if [ ! -f "$dest/.complete" ]; then
    got=$(sha256sum "$tarball" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { echo "build-conformance.sh: $tarball has sha256 $got, expected $sha" >&2; exit 1; }
    rm -rf "$dest"
    mkdir -p "$dest/src" "$dest/crd"
    tar -xzf "$tarball" -C "$dest/src"
    src="$dest/src/mcs-api"
    echo "building the mcs-api conformance suite (about 3 minutes cold)" >&2
    (cd "$src/conformance" && "${build_suite[@]}" -o "$dest/mcs-conformance.test.tmp" .)
    echo "building the mcs-api reference controller (about 1 minute cold)" >&2
    (cd "$src/controllers" && "${build_controller[@]}" -o "$dest/servicecontroller.tmp" ./cmd/servicecontroller)
    cp "$src/config/crd/multicluster.x-k8s.io_serviceexports.yaml" "$src/config/crd/multicluster.x-k8s.io_serviceimports.yaml" \
        "$src/LICENSE" "$dest/crd/"
    rm -rf "$dest/src"
    mv "$dest/mcs-conformance.test.tmp" "$dest/mcs-conformance.test"
    mv "$dest/servicecontroller.tmp" "$dest/servicecontroller"
    touch "$dest/.complete"
fi
ln -sfn "$h" "$cache/conformance/current"

# Images, cached by their inputs like build-images.sh's.
# shellcheck source=images.sh
. "$here/images.sh"

# The suite's pods, under the names its manifests give (no pull policy: a present image is used).
# alpine/socat runs `sh -c` with grep, tr, awk and `socat ... TCP-LISTEN:42 ... SYSTEM:'echo ...'`
# (minbase has sh, grep, tr and mawk as awk); nicolaka/netshoot runs `nslookup -type=A|AAAA|SRV`
# and `nc -v -w 2 -4|-6` with grep, tail and awk.
debian socat docker.io/alpine/socat:1.7.4.4 "socat" "socat"
debian netshoot docker.io/nicolaka/netshoot:v0.15 "bind9-dnsutils,netcat-openbsd" "sh"

# The reference controller: its static binary alone, as the entrypoint.
h=$(sha256sum "$dest/servicecontroller" | cut -c1-16)
if ! fresh mcs-controller "$h"; then
    c=$(buildah from scratch)
    buildah copy -q "$c" "$dest/servicecontroller" /servicecontroller >/dev/null
    buildah config --entrypoint '["/servicecontroller"]' --user 65532:65532 "$c"
    commit "$c" mcs-controller localhost/mcs-controller:dev "$h"
fi

# The suite writes report.yaml/report.html into its working directory: the cache, not the caller's.
(cd "$dest" && ./mcs-conformance.test --ginkgo.dry-run --ginkgo.no-color --ginkgo.label-filter=DNS 2>&1) \
    | grep -E '^Ran|Will run' >&2 || true
echo "$dest"
