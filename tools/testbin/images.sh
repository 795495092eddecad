# Shared by build-images.sh and build-conformance.sh (sourced, not run; $cache set first): where
# the image archives go and how one is made, with buildah and mmdebstrap and no registry. Each
# image lands as an OCI archive $out/NAME-HASH.tar (HASH covers the image's inputs, so a changed
# binary, package list or command rebuilds it) with NAME.tar linking the current one; the one-node
# cluster imports those into containerd.

for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed (apt-get install $tool; .ci/run installs it)" >&2; exit 1; }
done
out="$cache/images"
mkdir -p "$out"
suite=bookworm
mirror=http://deb.debian.org/debian

fresh() {  # fresh NAME HASH: true (and links NAME.tar) when the archive for HASH exists
    if [ -f "$out/$1-$2.tar" ]; then ln -sfn "$1-$2.tar" "$out/$1.tar"; return 0; fi
    return 1
}

landed() {  # landed NAME HASH REF: the archive written to NAME-HASH.tar.tmp is whole: keep it, link it
    mv "$out/$1-$2.tar.tmp" "$out/$1-$2.tar"
    ln -sfn "$1-$2.tar" "$out/$1.tar"
    echo "built $3 ($(du -h "$out/$1-$2.tar" | cut -f1))" >&2
}

commit() {  # commit CONTAINER NAME REF HASH: write the OCI archive named REF, link it, drop the container
    buildah commit -q --rm "$1" "oci-archive:$out/$2-$4.tar.tmp:$3" >/dev/null
    landed "$2" "$4" "$3"
}

debian() {  # debian NAME REF PACKAGES CMD: a minbase Debian with PACKAGES, committed as REF
    local name=$1 ref=$2 packages=$3 cmd=$4 h c tar
    h=$(printf '%s\n' "$suite" "$mirror" "$ref" "$packages" "$cmd" | sha256sum | cut -c1-16)
    fresh "$name" "$h" && return
    tar="$out/$name-$h.rootfs.tar"
    mmdebstrap --quiet --variant=minbase --include="$packages" \
        --dpkgopt='path-exclude=/usr/share/{doc,man,info,locale}/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        "$suite" "$tar" "$mirror"
    c=$(buildah from scratch)
    buildah add -q "$c" "$tar" / >/dev/null
    rm -f "$tar"
    buildah config --cmd "$cmd" "$c"
    commit "$c" "$name" "$ref" "$h"
}
