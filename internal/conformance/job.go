package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
)

// Job connects n in-process ranks through a real rendezvous store on the
// loopback interface, with token, exactly as separate processes would:
// connect builds rank r's transport on a store connection of its own,
// which stays open as long as the transports (links are made on demand,
// through it). A rank that fails to connect fails the test. When the test
// ends the transports close at once, as a job's ranks do (each waits a
// moment for its peers' goodbyes), then the store connections.
func Job[T interface{ Close() error }](tb testing.TB, n int, token []byte, connect func(ctx context.Context, store *bootstrap.Client, r int) (T, error)) []T {
	tb.Helper()
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]T, n)
	ok := make([]bool, n)
	stores := make([]*bootstrap.Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stores[r], errs[r] = bootstrap.Dial(ctx, srv.Addr(), token); errs[r] != nil {
				return
			}
			ts[r], errs[r] = connect(ctx, stores[r], r)
			ok[r] = errs[r] == nil
		}()
	}
	wg.Wait()
	tb.Cleanup(func() {
		var wg sync.WaitGroup
		for r, tr := range ts {
			if ok[r] {
				wg.Add(1)
				go func() { defer wg.Done(); tr.Close() }()
			}
		}
		wg.Wait()
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts
}
