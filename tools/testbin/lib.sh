# Shared by build.sh and build-node.sh: build a Go wrapper module's mains into a
# cache directory named by the module's hash, so a warm run takes seconds and a
# changed go.mod, go.sum or source rebuilds. Sourced, not run.

hash_of() { (cd "$1" && cat go.mod go.sum *.go | sha256sum | cut -c1-16); }

build_module() {  # build_module DIR OUT -- PKG=NAME...   (uses $LDFLAGS)
    local dir=$1 out=$2; shift 2
    local h; h=$(hash_of "$dir")
    local dest="$out/$h"
    if [ -f "$dest/.complete" ]; then echo "$dest"; return; fi
    mkdir -p "$dest"
    local spec pkg name
    for spec in "$@"; do
        pkg=${spec%%=*}; name=${spec##*=}
        echo "building $name from $pkg (cold builds take 10-20 minutes)" >&2
        (cd "$dir" && go build -trimpath -ldflags "$LDFLAGS" -o "$dest/$name.tmp" "$pkg")
        mv "$dest/$name.tmp" "$dest/$name"
    done
    touch "$dest/.complete"
    echo "$dest"
}
