//go:build tools

// Package tools pins the upstream main this module builds: helm, for
// `helm lint` and `helm template` of deploy/helm/mcsdns in tests/test_helm.py.
// Helm 3.19 uses the Kubernetes 1.34 client libraries, the version of the
// kube-apiserver the tests run; build.sh links in 1.34 as the version helm
// assumes without a cluster, as helm's Makefile does. Nothing here is our code.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
