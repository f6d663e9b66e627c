package comm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestSoak runs thousands of mixed collectives of random kinds, element
// types, sizes and roots on 4 ranks, checking every result on every rank:
// the long-running counterpart of the conformance suite, for the bugs that
// only show after many calls (slot reuse, credit leaks, sequence wrap,
// races that -race catches only when they happen). GOCOLL_SOAK sets the
// number of collectives (default 3000; 1000 with -short, as in CI's race
// run, which also runs the 3000 without the race detector).
func TestSoak(t *testing.T) {
	calls := 3000
	switch {
	case testmode.Quick():
		calls = 300
	case testing.Short():
		calls = 1000 // .ci/test runs the 3000 without -race too
	}
	if v, err := strconv.Atoi(os.Getenv("GOCOLL_SOAK")); err == nil && v > 0 {
		calls = v
	}
	const n = 4
	cs := local(t, n)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	counts := make([]map[string]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[r], errs[r] = soak(ctx, c, seed, calls)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v (seed %d)", r, err, seed)
		}
	}
	if t.Failed() {
		return
	}
	total := 0
	for _, k := range counts[0] {
		total += k
	}
	if total != calls {
		t.Fatalf("%d collectives checked, want %d", total, calls)
	}
	t.Logf("%d collectives on %d ranks in %v: %v", total, n, time.Since(start).Round(time.Millisecond), counts[0])
}

// soak is one rank's part: every rank draws the same stream from seed, so
// all call the same collective with the same arguments. Inputs are small
// integers, exact in every type, so results are checked exactly.
func soak(ctx context.Context, c *comm.Communicator, seed uint64, calls int) (map[string]int, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	n, me := c.Size(), c.Rank()
	done := map[string]int{}
	for i := 0; i < calls; i++ {
		count := rng.IntN(64)
		switch rng.IntN(10) {
		case 0:
			count = rng.IntN(200_000) // several slots, a pipelined ring
		case 1, 2:
			count = rng.IntN(5000)
		}
		var err error
		var what string
		switch rng.IntN(3) {
		case 0:
			what, err = soakOne[int32](ctx, c, rng, i, count, me, n)
		case 1:
			what, err = soakOne[float32](ctx, c, rng, i, count, me, n)
		default:
			what, err = soakOne[uint8](ctx, c, rng, i, count, me, n)
		}
		if err != nil {
			return done, fmt.Errorf("collective %d (%s of %d): %w", i, what, count, err)
		}
		done[what]++
	}
	return done, nil
}

func soakOne[T int32 | float32 | uint8](ctx context.Context, c *comm.Communicator, rng *rand.Rand, call, count, me, n int) (string, error) {
	val := func(r, j int) T { return T((r*31 + j*7 + call) % 5) }
	check := func(got []T, want func(j int) T) error {
		for j, v := range got {
			if w := want(j); v != w {
				return fmt.Errorf("element %d is %v, want %v", j, v, w)
			}
		}
		return nil
	}
	switch kind := rng.IntN(5); kind {
	case 0:
		buf := make([]T, count)
		for j := range buf {
			buf[j] = val(me, j)
		}
		if err := comm.AllReduce(ctx, c, buf, comm.Sum); err != nil {
			return "allreduce", err
		}
		return "allreduce", check(buf, func(j int) T {
			var s T
			for r := 0; r < n; r++ {
				s += val(r, j)
			}
			return s
		})
	case 1:
		root := rng.IntN(n)
		buf := make([]T, count)
		for j := range buf {
			buf[j] = val(me, j)
		}
		if err := comm.Broadcast(ctx, c, buf, root); err != nil {
			return "broadcast", err
		}
		return "broadcast", check(buf, func(j int) T { return val(root, j) })
	case 2:
		send := make([]T, count)
		for j := range send {
			send[j] = val(me, j)
		}
		recv := make([]T, count*n)
		if err := comm.AllGather(ctx, c, send, recv); err != nil {
			return "allgather", err
		}
		return "allgather", check(recv, func(j int) T { return val(j/max(count, 1), j%max(count, 1)) })
	case 3:
		send := make([]T, count*n)
		for j := range send {
			send[j] = val(me, j)
		}
		recv := make([]T, count)
		if err := comm.ReduceScatter(ctx, c, send, recv, comm.Max); err != nil {
			return "reducescatter", err
		}
		return "reducescatter", check(recv, func(j int) T {
			m := val(0, me*count+j)
			for r := 1; r < n; r++ {
				m = max(m, val(r, me*count+j))
			}
			return m
		})
	default:
		return "barrier", c.Barrier(ctx)
	}
}
