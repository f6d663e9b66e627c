package shm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
)

// mesh connects n in-process ranks over shared memory through a real
// rendezvous store, exactly as separate processes would.
func mesh(t testing.TB, n int, opts shm.Options) []*shm.Transport {
	t.Helper()
	if opts.Spin == 0 {
		opts.Spin = shm.SpinFor(n) // all n ranks share this process's cores
	}
	token := []byte("conformance-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]*shm.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			defer store.Close()
			ts[r], errs[r] = shm.Connect(ctx, store, r, n, token, opts)
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func(tr *shm.Transport) { defer wg.Done(); tr.Close() }(tr)
			}
		}
		wg.Wait()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts
}

func asTransports(ts []*shm.Transport) []transport.Transport {
	out := make([]transport.Transport, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport { return asTransports(mesh(t, n, shm.Options{})) })
}

// TestConformanceSmallSlots runs the suite with the smallest slots and
// fewest of them, so that every size spans many messages and senders wait
// on credits all the time.
func TestConformanceSmallSlots(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport {
		return asTransports(mesh(t, n, shm.Options{Slots: 2, SlotSize: 4 << 10}))
	})
}
