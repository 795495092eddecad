//go:build tools

// Package tools pins the upstream mains of a one-node cluster's node and control
// loops -- kubelet, kube-proxy, kube-controller-manager, kube-scheduler -- for
// testsupport/cluster.py. A module of its own, beside ../kube (same
// k8s.io/kubernetes version and replaces), so adding these never changes the
// hash that caches kube-apiserver and etcd. Nothing here is our code.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
