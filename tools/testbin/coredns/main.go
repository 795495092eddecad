// Command coredns is a trimmed CoreDNS: only the plugins the differential
// tests and benchmarks need, plus those of kubeadm's default Corefile (reload,
// loop, loadbalance) for testsupport/cluster.py's cluster DNS, so the build
// does not pull every cloud SDK.
// See coredns.io "compile time enabling or disabling plugins".
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/cache"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/transfer"
)

// directives is the plugin order, a subset of CoreDNS's plugin.cfg order.
var directives = []string{
	"reload",
	"bind",
	"prometheus",
	"errors",
	"log",
	"health",
	"ready",
	"loadbalance",
	"cache",
	"transfer",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
