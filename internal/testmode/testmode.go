// Package testmode tells tests how much to run. GOCOLL_QUICK=1 asks for the
// quick check a developer runs while working (.ci/quick, under a minute on
// 2 cores): every package still runs, but the slowest tests (the
// conformance suite's larger jobs, launchers, network namespaces, kills at
// random points) shrink or leave it to the full run, which CI does.
package testmode

import (
	"os"
	"testing"

	"github.com/gocoll/gocoll/internal/settings"
)

var quick = settings.Quick(os.LookupEnv)

// Quick reports whether GOCOLL_QUICK asks for the quick check.
func Quick() bool { return quick }

// SkipIfQuick skips t in the quick check: the full run has it.
func SkipIfQuick(t testing.TB) {
	t.Helper()
	if quick {
		t.Skip("GOCOLL_QUICK: left to the full run (.ci/test)")
	}
}

var transportOnly = settings.Conformance(os.LookupEnv) == "transport"

// TransportOnly reports whether GOCOLL_CONFORMANCE=transport asks the
// conformance suite to test a transport rather than the reductions: one
// element type per shape a transport can tell apart (each size, and
// 16-bit floats, whose partial results travel as float32), every op on
// float32 alone, and job sizes 1, 2, 3, 4 and 8. The reductions are the same code over every transport,
// and the tcp and shm runs test every type and op; the RDMA run in the
// emulated VM, where each collective costs a hundred times more, samples.
func TransportOnly() bool { return transportOnly }
