//go:build linux

package shm

import (
	"context"
	"github.com/gocoll/gocoll/transport"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
)

// TestSimultaneousLink has both ends of every pair of a job of 4 reach
// for each other at the same moment, with no grace for the higher rank
// to dial first, many times over: each time exactly one pair of rings per
// pair of ranks must survive, the two ends holding the same two rings.
func TestSimultaneousLink(t *testing.T) {
	defer func(g time.Duration) { dialGrace = g }(dialGrace)
	dialGrace = time.Nanosecond
	token := []byte("simultaneous-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 4
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		ts := make([]*Transport, n)
		for r := range ts {
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			o := Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10, Namespace: "round" + string(rune('a'+round)) + "/"}}
			if ts[r], err = Connect(ctx, store, r, n, token, o); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, n*n)
		for a := range n {
			for b := range n {
				if a == b {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if err := ts[a].Send(ctx, b, []byte{byte(a)}); err != nil {
						errs <- err
						return
					}
					m, err := ts[a].Recv(ctx, b)
					if err != nil {
						errs <- err
						return
					}
					if len(m.Data) != 1 || int(m.Data[0]) != b {
						t.Errorf("round %d: rank %d got %v from rank %d", round, a, m.Data, b)
					}
					ts[a].Release(m)
				}()
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		for a := range n {
			if got := ts[a].Links(); got != n-1 {
				t.Errorf("round %d: rank %d has %d links, want %d", round, a, got, n-1)
			}
			for b := range n {
				if a == b {
					continue
				}
				pa, pb := ts[a].lookup(b), ts[b].lookup(a)
				// Every rank is a goroutine of this process, which a
				// crowded wait yields to through the runtime.
				if !pa.local || pa.pid != os.Getpid() {
					t.Errorf("round %d: rank %d's peer %d: local %v, pid %d, want true and this process's %d", round, a, b, pa.local, pa.pid, os.Getpid())
				}
				if &pa.out.mem[0] == &pb.in.mem[0] {
					t.Fatalf("round %d: ranks %d and %d share a mapping", round, a, b)
				}
				// The two ends map the same ring: what one writes at
				// the end of the header page, the other reads.
				pa.out.mem[pageSize-1] = byte(round + 1)
				if pb.in.mem[pageSize-1] != byte(round+1) {
					t.Errorf("round %d: rank %d's ring to %d is not the one %d receives on", round, a, b, b)
				}
			}
		}
		// Nothing else is mapped: a connection declined made no ring,
		// and every pair of ranks holds two rings, each mapped at both
		// ends.
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Count(string(maps), "memfd:gocoll-shm"), 4*n*(n-1)/2; got != want {
			t.Errorf("round %d: %d ring mappings, want %d", round, got, want)
		}
		for _, tr := range ts {
			tr.Close()
		}
	}
}
