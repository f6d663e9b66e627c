//go:build !unix

package main

import (
	"fmt"
	"os"
	"runtime"
)

// grun starts, signals and stops ranks through process groups and POSIX
// signals (launch.go, remote.go, job.go), which this system lacks; the
// transports cannot connect ranks here either. It says so and exits.
func main() {
	fmt.Fprintf(os.Stderr, "grun: launching ranks needs a Unix system (process groups, signals); this is %s\n", runtime.GOOS)
	os.Exit(1) // as exitInternal: grun itself could not do its job
}
