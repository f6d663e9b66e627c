package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestSplitConcurrent splits 6 ranks into evens and odds (keys reversing
// the order in the odd half) and runs both halves' collectives, the whole
// job's collectives and point-to-point traffic at the same time from
// different goroutines, checking every result.
func TestSplitConcurrent(t *testing.T) {
	cs := local(t, 6, comm.WithTCPOptions(tcpSmall()))
	n := len(cs)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		key := r
		if r%2 == 1 {
			key = -r
		}
		sub, err := c.Split(ctx, r%2, key)
		if err != nil {
			return err
		}
		defer sub.Close()
		if sub.Size() != 3 {
			return fmt.Errorf("sub size %d", sub.Size())
		}
		wantRank := r / 2
		if r%2 == 1 {
			wantRank = 2 - r/2
		}
		if sub.Rank() != wantRank {
			return fmt.Errorf("sub rank %d, want %d", sub.Rank(), wantRank)
		}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		wg.Add(3)
		go func() {
			defer wg.Done()
			for i := range 20 {
				v := make([]int64, 3000)
				for k := range v {
					v[k] = int64(r + k + i)
				}
				if err := comm.AllReduce(ctx, sub, v, comm.Sum); err != nil {
					errs[0] = err
					return
				}
				// Members of the half: r%2, r%2+2, r%2+4.
				base := int64(3*(r%2) + 6)
				for k := range v {
					if v[k] != base+3*int64(k+i) {
						errs[0] = fmt.Errorf("sub allreduce round %d element %d = %d, want %d", i, k, v[k], base+3*int64(k+i))
						return
					}
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 20 {
				v := []float32{float32(r), float32(i)}
				if err := comm.AllReduce(ctx, c, v, comm.Max); err != nil {
					errs[1] = err
					return
				}
				if v[0] != float32(n-1) || v[1] != float32(i) {
					errs[1] = fmt.Errorf("world allreduce round %d = %v", i, v)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			// Within the half, by sub-communicator ranks.
			m := sub.Size()
			next, prev := (sub.Rank()+1)%m, (sub.Rank()+m-1)%m
			out := make([]int32, 20000)
			for k := range out {
				out[k] = int32(sub.Rank()*100000 + k)
			}
			in := make([]int32, len(out))
			for range 5 {
				if _, err := comm.SendRecv(ctx, sub, out, next, 1, in, prev, 1); err != nil {
					errs[2] = err
					return
				}
				if in[0] != int32(prev*100000) || in[len(in)-1] != int32(prev*100000+len(in)-1) {
					errs[2] = fmt.Errorf("sub sendrecv got %d..%d from sub rank %d", in[0], in[len(in)-1], prev)
					return
				}
			}
		}()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		// Sub-communicators of the sub-communicator, and ranks left out.
		pair, err := sub.SubCommunicator(ctx, []int{2, 0})
		if err != nil {
			return err
		}
		if sub.Rank() == 1 {
			if pair != nil {
				return fmt.Errorf("rank left out of SubCommunicator got %v", pair)
			}
			return nil
		}
		defer pair.Close()
		v := []int32{int32(r)}
		if err := comm.Broadcast(ctx, pair, v, 0); err != nil {
			return err
		}
		// Pair rank 0 is sub rank 2.
		if want := int32(r%2 + 4); r%2 == 1 {
			if v[0] != 1 {
				return fmt.Errorf("odd pair broadcast = %d, want 1", v[0])
			}
		} else if v[0] != want {
			return fmt.Errorf("even pair broadcast = %d, want %d", v[0], want)
		}
		return nil
	})
}
