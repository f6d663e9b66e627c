package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestAsync overlaps an allreduce with computation, keeps several
// collectives of different kinds in flight (issued in the same order on
// every rank, waited for in reverse), and checks Test.
func TestAsync(t *testing.T) {
	cs := local(t, 4)
	n := len(cs)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		grads := make([]float32, 50000)
		for i := range grads {
			grads[i] = float32(r + i%10)
		}
		req := comm.AllReduceAsync(ctx, c, grads, comm.Sum)
		// Computation while the allreduce runs.
		acc := 0.0
		for i := range 200000 {
			acc += float64(i%7) * 0.5
		}
		if acc != 299997 {
			return fmt.Errorf("computation = %v", acc)
		}
		b := []int64{int64(r)}
		all := make([]int64, n)
		reqs := []*comm.Request{
			comm.BroadcastAsync(ctx, c, b, n-1),
			comm.AllGatherAsync(ctx, c, []int64{int64(10 * r)}, all),
			c.BarrierAsync(ctx),
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			if err := reqs[i].Wait(ctx); err != nil {
				return err
			}
		}
		if err := req.Wait(ctx); err != nil {
			return err
		}
		if done, err := req.Test(); !done || err != nil {
			return fmt.Errorf("Test after Wait = %v, %v", done, err)
		}
		for i, v := range grads {
			if want := float32(n*(n-1)/2 + n*(i%10)); v != want {
				return fmt.Errorf("grads[%d] = %v, want %v", i, v, want)
			}
		}
		if b[0] != int64(n-1) {
			return fmt.Errorf("broadcast = %d", b[0])
		}
		for q, v := range all {
			if v != int64(10*q) {
				return fmt.Errorf("allgather[%d] = %d", q, v)
			}
		}
		// A blocking call issued after async ones runs after them.
		x := []int32{1}
		pending := comm.AllReduceAsync(ctx, c, x, comm.Sum)
		y := []int32{int32(r)}
		if err := comm.AllReduce(ctx, c, y, comm.Max); err != nil {
			return err
		}
		if done, err := pending.Test(); !done || err != nil || x[0] != int32(n) {
			return fmt.Errorf("earlier async call not done before a later blocking one: %v %v %v", done, err, x)
		}
		// Batched.
		bufs := [][]float64{{float64(r)}, {}, {1, 2, 3}, make([]float64, 1000)}
		if err := comm.AllReduceMany(ctx, c, bufs, comm.Sum); err != nil {
			return err
		}
		if bufs[0][0] != float64(n*(n-1)/2) || bufs[2][2] != float64(3*n) || bufs[3][999] != 0 {
			return fmt.Errorf("allreducemany = %v %v", bufs[0], bufs[2])
		}
		return comm.WaitAll(ctx, comm.AllReduceManyAsync(ctx, c, bufs[:3], comm.Max), c.BarrierAsync(ctx))
	})
	// Wait honours its own ctx; the collective goes on.
	c := cs[0]
	req := comm.AllReduceAsync(context.Background(), c, []float32{1}, comm.Sum) // the others never join
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := req.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a short ctx = %v, want DeadlineExceeded", err)
	}
	if done, _ := req.Test(); done {
		t.Errorf("collective without its peers reported done")
	}
	c.Abort(errors.New("test over"))
	if err := req.Wait(context.Background()); !errors.Is(err, comm.ErrAborted) {
		t.Errorf("after Abort: %v, want ErrAborted", err)
	}
}

// TestGiveUpBeforeTurn: a collective whose ctx ends while it waits for its
// turn returns at once, sends nothing, and does not let the one issued
// after it overtake the one before it (rank 0's third allreduce, 2
// elements, would meet rank 1's second). When its turn comes the other
// ranks, which will wait for it in vain, are told: rank 1's second
// allreduce fails naming rank 0, and so does rank 0's third.
func TestGiveUpBeforeTurn(t *testing.T) {
	cs := local(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, third := []float32{1}, []float32{10, 20}
	reqFirst := comm.AllReduceAsync(ctx, cs[0], first, comm.Sum)
	short, cancelShort := context.WithCancel(ctx)
	reqSecond := comm.AllReduceAsync(short, cs[0], []float32{5, 5, 5}, comm.Sum)
	cancelShort()
	if err := reqSecond.Wait(ctx); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for the previous collective") {
		t.Fatalf("second allreduce, cancelled before its turn: %v, want Canceled while waiting for the previous collective", err)
	}
	reqThird := comm.AllReduceAsync(ctx, cs[0], third, comm.Sum)
	if done, _ := reqThird.Test(); done {
		t.Fatalf("the third allreduce finished before the first, which waits for rank 1")
	}
	other := []float32{2}
	if err := comm.AllReduce(ctx, cs[1], other, comm.Sum); err != nil {
		t.Fatalf("rank 1, first: %v", err)
	}
	if err := reqFirst.Wait(ctx); err != nil || first[0] != 3 || other[0] != 3 {
		t.Fatalf("first allreduce: %v, results %v and %v, want [3]", err, first, other)
	}
	start := time.Now()
	err := comm.AllReduce(ctx, cs[1], []float32{1, 2, 3}, comm.Sum)
	if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 0 gave up") {
		t.Errorf("rank 1, second: %v, want ErrPeerLost saying rank 0 gave it up", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("rank 1 learnt of it after %v", d)
	}
	if err := reqThird.Wait(ctx); !errors.Is(err, comm.ErrBroken) {
		t.Errorf("rank 0, third: %v, want ErrBroken", err)
	}
}
