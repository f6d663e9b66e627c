// Package testmode tells tests how much to run. GOCOLL_QUICK=1 asks for the
// quick check a developer runs while working (.ci/quick, under a minute on
// 2 cores): every package still runs, but the slowest tests (the
// conformance suite's larger jobs, launchers, network namespaces, kills at
// random points) shrink or leave it to the full run, which CI does.
package testmode

import (
	"os"
	"testing"
)

var quick = os.Getenv("GOCOLL_QUICK") != ""

// Quick reports whether GOCOLL_QUICK asks for the quick check.
func Quick() bool { return quick }

// SkipIfQuick skips t in the quick check: the full run has it.
func SkipIfQuick(t testing.TB) {
	t.Helper()
	if quick {
		t.Skip("GOCOLL_QUICK: left to the full run (.ci/test)")
	}
}
