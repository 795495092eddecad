# Shared by build.sh and build-node.sh (sourced, not run): the cache directory,
# the Go settings, and build_module, which builds a Go wrapper module's mains
# into a cache directory named by the module's hash, so a warm run takes seconds
# and a changed go.mod, go.sum or source rebuilds.

cache=${MCSDNS_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcsdns/testbin}
bin="$cache/bin"
mkdir -p "$bin"
export GOFLAGS=${GOFLAGS:--buildvcs=false}
export CGO_ENABLED=0
# The compiler collects garbage less often, which shortens the cold builds (benchmarks/results/build_gogc.txt).
export GOGC=${GOGC:-400}
# kube-apiserver's and the node binaries' /version (and kubectl's) tell the truth: the release
# a wrapper module requires, stamped as Kubernetes' own build does.
kube_ldflags() {  # kube_ldflags MODULE_DIR
    local version minor
    version=$(sed -n 's/^\(require \|\t\)k8s\.io\/kubernetes \(v[0-9.]*\)$/\2/p' "$1/go.mod")
    [ -n "$version" ] || { echo "lib.sh: $1/go.mod requires no k8s.io/kubernetes release" >&2; return 1; }
    minor=${version#v1.}; minor=${minor%%.*}
    echo "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

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
