// Package mesh holds what the transports share at Connect. Build is the
// all-to-all pattern of connections the socket transports (tcp, shm) set
// up: every rank dials every lower rank and accepts every higher one, all
// at once, so that a job of n ranks connects in the time of its slowest
// link, not of n-1 links in a row. Rings and Spin are the defaults and
// checks of the options every transport (rdma too) takes.
package mesh

import (
	"context"
	"fmt"
	"sync"
)

// Build connects rank to the other size-1 ranks and returns one peer per
// rank (the zero P at rank itself). dial reaches one lower rank; accept
// runs until ctx ends or stopAccept is called (closing the listener it
// blocks on), handing each higher rank that connected (or the error that
// stopped it) to deliver, and must not count strangers it refused. rankOf
// says which rank a peer is. On the first error Build stops
// and returns it with the peers connected so far, which the caller
// releases; peers that arrive after that are given to discard.
// what names the transport in errors ("tcp", "shm").
func Build[P any](ctx context.Context, what string, rank, size int,
	dial func(ctx context.Context, r int) (P, error),
	accept func(ctx context.Context, deliver func(P, error)), stopAccept func(),
	rankOf func(P) int, discard func(P)) ([]P, error) {
	type result struct {
		p   P
		ok  bool
		err error
	}
	results := make(chan result, size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for r := 0; r < rank; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			p, err := dial(ctx, r)
			results <- result{p, err == nil, err}
		}(r)
	}
	if rank < size-1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accept(ctx, func(p P, err error) { results <- result{p, err == nil, err} })
		}()
	}
	peers := make([]P, size)
	got := make([]bool, size)
	var firstErr error
	for n := 0; n < size-1; n++ {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			r.err = fmt.Errorf("%s: building the mesh: %w", what, ctx.Err())
		}
		if r.err != nil {
			firstErr = r.err
			break
		}
		peers[rankOf(r.p)], got[rankOf(r.p)] = r.p, true
	}
	cancel()
	stopAccept()
	wg.Wait()
	// Late arrivals after a failure still need releasing.
	close(results)
	for r := range results {
		if r.ok && !got[rankOf(r.p)] {
			discard(r.p)
		}
	}
	return peers, firstErr
}
