//go:build linux

package shm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// TestWaitSharesTheSoleP: a goroutine made runnable as a spinning wait
// starts runs within mesh.SolePolls polls where the process has a single
// P (crowded: within the crowded clock period, which is shorter), where
// before it waited for the wait's clock reading every 1024 polls or for
// the runtime's preemption 10 ms on (conformance.SoleP).
func TestWaitSharesTheSoleP(t *testing.T) {
	for _, crowded := range []bool{false, true} {
		within := mesh.SolePolls
		if crowded {
			within = 64
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ts := pair(t, transport.LinkOptions{Spin: time.Hour, Crowded: crowded})
		p := ts[0].lookup(1)
		conformance.SoleP(t, within, func(_ int, poll func()) error {
			var ran atomic.Bool
			go func() { ran.Store(true) }()
			var word, flag atomic.Uint32
			return ts[0].wait(ctx, p, &word, &flag, func() bool {
				poll()
				return ran.Load()
			})
		})
	}
}
