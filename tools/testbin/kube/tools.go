//go:build tools

// Package tools pins the upstream mains this module builds: kube-apiserver,
// etcd and kubectl (for `kubectl apply -k deploy/` in tests/test_deploy.py),
// at the versions Kubernetes 1.37 itself uses. Nothing here is
// our code; the module exists only so `go build` can resolve k8s.io/kubernetes
// with its staging modules replaced by their published versions.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
