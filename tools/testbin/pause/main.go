// Command pause is the sandbox ("pause") container of testsupport/cluster.py's
// node: it holds a pod's namespaces open and exits on SIGTERM or SIGINT. No
// registry is reachable, so the image is built here from this static binary
// instead of pulled (registry.k8s.io/pause does the same in C).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
