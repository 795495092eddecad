//go:build tools

// Package tools pins Submariner Lighthouse's agent (github.com/submariner-io/lighthouse
// pkg/agent, a main package) for testsupport/lighthouse.py: a real MCS implementation
// that turns ServiceExports into ServiceImports and EndpointSlices through a broker.
// `go install ...@v0.20.0` fails (it asks the proxy for the module's version list,
// which the proxy refuses, to check for a deprecation), so
// build-lighthouse.sh builds the main from this module instead. Nothing here is our code.
package tools

import (
	_ "github.com/submariner-io/lighthouse/pkg/agent"
)
