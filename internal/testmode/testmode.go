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

var sampled = quick || settings.Conformance(os.LookupEnv) == "transport"

// Sampled reports whether the conformance suite samples element types and
// ops, as GOCOLL_CONFORMANCE=transport asks for a run that tests a
// transport rather than the reductions, and as the quick check does too:
// one element type per shape a transport can tell apart (each size, and
// 16-bit floats, whose partial results travel as float32), every op on
// float32 alone, ExactSum without the GOCOLL_ALGO overrides it ignores,
// and jobs of 1, 2, 3 and 8 ranks.
// The reductions are the same code over every transport; the full run
// (.ci/test) tries every type and op over tcp and shm, and internal/reduce
// tests every kernel against its scalar reference. The race run and the
// RDMA run in the emulated VM, where each collective costs a hundred times
// more, sample.
func Sampled() bool { return sampled }

// Race reports whether the tests were built with the race detector. What
// races is the transports' and collectives' concurrency, which small jobs
// reach as well as large ones: the conformance suite runs a transport's
// variants (tiny slots, sealed links, the shm+tcp hybrid) on 2 and 3
// ranks under it, and on 1 to 8 ranks in the full run without it.
func Race() bool { return race }
