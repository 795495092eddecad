//go:build tools

// Package tools pins kube-apiserver 1.34.4 (the previous default) for the version matrix (build-versions.sh):
// one wrapper module per Kubernetes minor, so each minor's cache is its own and
// the default testbin (../kube) keeps its hash. Nothing here is our code.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
