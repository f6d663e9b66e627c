package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
)

// TestGrowWithoutToken: an elastic job without a token, over TCP, whose
// links authenticate with the secret its store hands each rank, admits a
// replacement: the replacement's links work only if the store handed it
// the same secret as it joined (a replacement linking with no token
// would be refused by every member's listener).
func TestGrowWithoutToken(t *testing.T) {
	srv, err := bootstrap.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	opts := []comm.Option{comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20 * time.Second)}
	const n = 3
	cfg := func(r int) comm.Config {
		return comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: srv.Addr(), Source: "test"}
	}
	cs := make([]*comm.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = comm.New(ctx, cfg(r), opts...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() { closeAll(t, cs) })

	var joined *comm.Communicator
	var joinErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		joined, joinErr = comm.New(ctx, cfg(1), opts...)
		if joinErr == nil {
			v := []int32{int32(joined.Rank())}
			joinErr = comm.AllReduce(ctx, joined, v, comm.Sum)
			if joinErr == nil && v[0] != 6 {
				joinErr = fmt.Errorf("allreduce on the grown communicator = %d, want 6", v[0])
			}
		}
	}()
	for _, c := range cs {
		for c.Pending() != 1 {
			if ctx.Err() != nil {
				t.Fatalf("rank %d never saw the replacement waiting", c.Rank())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	grown := growBy1(t, cs)
	<-done
	if joinErr != nil {
		t.Fatalf("replacement: %v", joinErr)
	}
	closeAll(t, append(grown, joined))
}
