//go:build linux

package shm

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// TestWaitSharesTheSoleP pins what a spinning wait owes the other
// goroutines of a rank that has a single P (GOMAXPROCS=1, as grun's
// binding to one CPU gives): a goroutine made runnable as the wait
// starts runs within solePolls polls (crowded: within the crowded clock
// period, which is shorter), where before it waited for the wait's
// clock reading every 1024 polls or for the runtime's preemption 10 ms
// on. The polls are counted, not timed: with one P the other goroutine
// runs only when the wait hands the P over, so the count is exact
// whatever the machine's load.
func TestWaitSharesTheSoleP(t *testing.T) {
	cases := []struct {
		name    string
		crowded bool
		within  int
	}{
		{"own core", false, solePolls},
		{"crowded", true, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// A spin far longer than the test: the wait never parks, so
			// only the turns it gives can let the other goroutine run.
			ts := pair(t, transport.LinkOptions{Spin: time.Hour, Crowded: tc.crowded})
			p := ts[0].lookup(1)
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for round := range 5 {
				var ran atomic.Bool
				go func() { ran.Store(true) }()
				polls := 0
				var word, flag atomic.Uint32
				err := ts[0].wait(ctx, p, &word, &flag, func() bool {
					polls++
					return ran.Load()
				})
				if err != nil {
					t.Fatalf("round %d: wait: %v", round, err)
				}
				// The poll that sees it is the one after the turn; one
				// turn in 61 goes to the global queue first, where the
				// wait itself is (the runtime's fairness), so the
				// goroutine may need a second turn.
				if want := 2*tc.within + 1; polls > want {
					t.Errorf("round %d: with GOMAXPROCS=1 the other goroutine ran only after %d polls of the wait, want at most %d", round, polls, want)
				}
			}
		})
	}
}
