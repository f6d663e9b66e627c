package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
)

// testMux shares each rank's transport between communicators: the whole
// job (id 0, whose collectives' first messages go without a lane header:
// see collectives.Mux), the even and the odd ranks (ids 2 and 3), and
// point-to-point lanes. The two halves run allreduces concurrently with the whole job's
// allreduces and with tagged messages, each from its own goroutine, and
// every result is checked; a lane nobody is receiving from (tag 9, read
// only at the end) must neither lose its messages nor block the others.
func testMux(t *testing.T, mesh Mesh, n int) {
	ts := mesh(t, n)
	muxes := make([]*collectives.Mux, n)
	for r := range ts {
		muxes[r] = collectives.NewMux(ts[r], 0)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	var halves [2][]int
	for q := 0; q < n; q++ {
		halves[q%2] = append(halves[q%2], q)
	}
	const rounds = 20
	count := ts[0].MaxMessage()/4 + 100 // two messages per chunk on two ranks
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for r := 0; r < n; r++ {
		world, err := muxes[r].Channel(0, all)
		if err != nil {
			t.Fatal(err)
		}
		half, err := muxes[r].Channel(uint64(2+r%2), halves[r%2])
		if err != nil {
			t.Fatal(err)
		}
		gw := collectives.NewGroup(world, collectives.Options{})
		gh := collectives.NewGroup(half, collectives.Options{})
		run := func(name string, f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(); err != nil {
					errs <- fmt.Errorf("rank %d %s: %w", r, name, err)
				}
			}()
		}
		run("world", func() error {
			for i := 0; i < rounds; i++ {
				b := alignedBytes(8 * count)
				for k := 0; k < count; k++ {
					put(reduce.Int64, b, k, float64(r+i+k))
				}
				if err := gw.AllReduce(ctx, b, reduce.Int64, reduce.Sum); err != nil {
					return err
				}
				for k := 0; k < count; k++ {
					if got, want := get(reduce.Int64, b, k), float64(n*(n-1)/2+n*(i+k)); got != want {
						return fmt.Errorf("round %d element %d: %v, want %v", i, k, got, want)
					}
				}
			}
			return nil
		})
		run("half", func() error {
			m := halves[r%2]
			for i := 0; i < rounds; i++ {
				b := alignedBytes(4 * count)
				for k := 0; k < count; k++ {
					put(reduce.Int32, b, k, float64(10*r+k%7))
				}
				if err := gh.AllReduce(ctx, b, reduce.Int32, reduce.Max); err != nil {
					return err
				}
				top := m[len(m)-1]
				for k := 0; k < count; k++ {
					if got, want := get(reduce.Int32, b, k), float64(10*top+k%7); got != want {
						return fmt.Errorf("round %d element %d: %v, want %v", i, k, got, want)
					}
				}
			}
			return nil
		})
		run("p2p", func() error {
			// A ring of tagged messages on the world channel, next to the
			// collectives on the same channel and connections. The message
			// spans several slots.
			next, prev := (r+1)%n, (r+n-1)%n
			out := bytes.Repeat([]byte{byte(r)}, 3*world.MaxMessage()+5)
			in := make([]byte, len(out))
			for i := 0; i < 3; i++ {
				// Unread until the end: queued at the receiver, not blocking.
				if err := world.SendTagged(ctx, next, 9, []byte{byte(i), byte(r)}); err != nil {
					return err
				}
			}
			for i := 0; i < rounds/4; i++ {
				done := make(chan error, 1)
				go func() { done <- world.SendTagged(ctx, next, 5, out) }()
				got, err := world.RecvTagged(ctx, prev, 5, in)
				if err := errors.Join(err, <-done); err != nil {
					return err
				}
				if got != len(in) || in[0] != byte(prev) || in[len(in)-1] != byte(prev) {
					return fmt.Errorf("round %d: %d bytes starting %d, want %d from rank %d", i, got, in[0], len(in), prev)
				}
			}
			small := make([]byte, 1)
			for i := 0; i < 3; i++ {
				got, err := world.RecvTagged(ctx, prev, 9, small)
				if !errors.Is(err, collectives.ErrTruncated) || got != 1 || small[0] != byte(i) {
					return fmt.Errorf("queued message %d: got %d bytes %v, err %v; want the first byte and ErrTruncated", i, got, small, err)
				}
			}
			return nil
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
