package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// tcpSmall makes every message span many small slots, so that senders
// wait on credits all the time.
func tcpSmall() tcp.Options { return tcp.Options{Slots: 2, SlotSize: 4 << 10} }

// TestMoreCollectives runs the rest of the collective set through the
// public API on 1, 3 and 4 ranks, each with results checked on every rank,
// both blocking and async.
func TestMoreCollectives(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cs := local(t, n)
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				r := c.Rank()
				// Reduce to every root, out of place; int16 max.
				for root := range n {
					send := []int16{int16(r), int16(-r), 7}
					var recv []int16
					if r == root {
						recv = make([]int16, 3)
					}
					if err := comm.Reduce(ctx, c, send, recv, comm.Max, root); err != nil {
						return err
					}
					if r == root && (recv[0] != int16(n-1) || recv[1] != 0 || recv[2] != 7) {
						t.Errorf("rank %d: reduce max at root %d = %v", r, root, recv)
					}
					if send[0] != int16(r) || send[1] != int16(-r) {
						t.Errorf("rank %d: reduce changed send to %v", r, send)
					}
				}
				// Gather then Scatter back.
				all := make([]float64, 2*n)
				if err := comm.Gather(ctx, c, []float64{float64(r), 0.5}, all, n-1); err != nil {
					return err
				}
				if r == n-1 {
					for q := range n {
						if all[2*q] != float64(q) || all[2*q+1] != 0.5 {
							t.Errorf("gather block %d = %v", q, all[2*q:2*q+2])
						}
					}
					for i := range all {
						all[i] *= 10
					}
				}
				back := make([]float64, 2)
				if err := comm.Scatter(ctx, c, all, back, n-1); err != nil {
					return err
				}
				if back[0] != float64(10*r) || back[1] != 5 {
					t.Errorf("rank %d: scatter = %v", r, back)
				}
				// AllGatherV with rank q contributing q elements (rank 0: none).
				counts := make([]int, n)
				tot := 0
				for q := range n {
					counts[q] = q
					tot += q
				}
				mine := make([]uint64, r)
				for i := range mine {
					mine[i] = uint64(100*r + i)
				}
				gv := make([]uint64, tot)
				if err := comm.AllGatherV(ctx, c, mine, gv, counts); err != nil {
					return err
				}
				off := 0
				for q := range n {
					for i := 0; i < q; i++ {
						if gv[off] != uint64(100*q+i) {
							t.Errorf("rank %d: allgatherv[%d] = %d, want %d", r, off, gv[off], 100*q+i)
						}
						off++
					}
				}
				// ReduceScatterV: sum of ones over unequal blocks.
				ones := make([]int32, tot)
				for i := range ones {
					ones[i] = 1
				}
				part := make([]int32, counts[r])
				if err := comm.ReduceScatterV(ctx, c, ones, part, counts, comm.Sum); err != nil {
					return err
				}
				for i, v := range part {
					if v != int32(n) {
						t.Errorf("rank %d: reducescatterv[%d] = %d, want %d", r, i, v, n)
					}
				}
				// AllToAll: block q of rank r holds 10r+q.
				a2a := make([]uint8, 2*n)
				for q := range n {
					a2a[2*q], a2a[2*q+1] = uint8(10*r+q), uint8(r)
				}
				got := make([]uint8, 2*n)
				if err := comm.AllToAll(ctx, c, a2a, got); err != nil {
					return err
				}
				for q := range n {
					if got[2*q] != uint8(10*q+r) || got[2*q+1] != uint8(q) {
						t.Errorf("rank %d: alltoall block from %d = %v", r, q, got[2*q:2*q+2])
					}
				}
				// AllToAllV: rank p sends p+q elements of value p to rank q.
				sc, rc := make([]int, n), make([]int, n)
				var send []comm.Float16
				rtot := 0
				for q := range n {
					sc[q], rc[q] = r+q, q+r
					for i := 0; i < r+q; i++ {
						send = append(send, comm.Float16Of(float32(r)))
					}
					rtot += q + r
				}
				recv := make([]comm.Float16, rtot)
				if err := comm.AllToAllV(ctx, c, send, sc, recv, rc); err != nil {
					return err
				}
				off = 0
				for q := range n {
					for i := 0; i < q+r; i++ {
						if recv[off].Float32() != float32(q) {
							t.Errorf("rank %d: alltoallv from %d = %v", r, q, recv[off].Float32())
						}
						off++
					}
				}
				return nil
			})
		})
	}
}

// TestMoreBadArguments: bad arguments to the new calls are refused before
// anything is sent, naming the fault, and the communicator stays usable.
func TestMoreBadArguments(t *testing.T) {
	cs := local(t, 2)
	c := cs[0]
	ctx := context.Background()
	buf := make([]float32, 8)
	cases := []struct {
		name string
		call func() error
		says string
	}{
		{"reduce root", func() error { return comm.Reduce(ctx, c, buf, buf, comm.Sum, 2) }, "root 2"},
		{"reduce recv", func() error { return comm.Reduce(ctx, c, buf, buf[:3], comm.Sum, 0) }, "len(recv) = 3"},
		{"reduce overlap", func() error { return comm.Reduce(ctx, c, buf[:4], buf[2:6], comm.Sum, 0) }, "overlap"},
		{"gather recv", func() error { return comm.Gather(ctx, c, buf[:2], buf[2:5], 0) }, "len(recv) = 3"},
		{"gather overlap", func() error { return comm.Gather(ctx, c, buf[1:3], buf[:4], 0) }, "overlaps"},
		{"scatter send", func() error { return comm.Scatter(ctx, c, buf[:5], buf[5:7], 0) }, "len(send) = 5"},
		{"allgatherv counts", func() error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:3], []int{1}) }, "len(counts) = 1"},
		{"allgatherv negative", func() error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:3], []int{1, -1}) }, "counts[1] = -1"},
		{"allgatherv sum", func() error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:5], []int{1, 2}) }, "sum of counts, 3"},
		{"reducescatterv sum", func() error { return comm.ReduceScatterV(ctx, c, buf[:4], buf[4:5], []int{1, 2}, comm.Sum) }, "sum of counts, 3"},
		{"alltoall uneven", func() error { return comm.AllToAll(ctx, c, buf[:3], buf[3:6]) }, "multiple of Size()"},
		{"alltoall overlap", func() error { return comm.AllToAll(ctx, c, buf[:4], buf[2:6]) }, "overlap"},
		{"alltoallv self", func() error { return comm.AllToAllV(ctx, c, buf[:1], []int{1, 0}, buf[1:1], []int{0, 0}) }, "to itself"},
		{"allreducemany overlap", func() error { return comm.AllReduceMany(ctx, c, [][]float32{buf[:3], buf[2:4]}, comm.Sum) }, "overlap"},
		{"allreducemany avg ints", func() error { return comm.AllReduceMany(ctx, c, [][]int8{{1}}, comm.Avg) }, "avg"},
		{"send peer", func() error { return comm.Send(ctx, c, 2, 0, buf) }, "peer 2"},
		{"recv tag", func() error { _, err := comm.Recv(ctx, c, 1, -1, buf); return err }, "tag -1"},
		{"sendrecv overlap", func() error { _, err := comm.SendRecv(ctx, c, buf[:4], 1, 0, buf[3:], 1, 0); return err }, "overlap"},
		{"split color", func() error { _, err := c.Split(ctx, -5, 0); return err }, "color -5"},
		{"subcommunicator dup", func() error { _, err := c.SubCommunicator(ctx, []int{0, 0}); return err }, "listed twice"},
		{"subcommunicator range", func() error { _, err := c.SubCommunicator(ctx, []int{3}); return err }, "rank 3"},
		{"async refused", func() error { return comm.AllToAllAsync(ctx, c, buf[:3], buf[3:6]).Wait(ctx) }, "multiple of Size()"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, comm.ErrInvalid) && !errors.Is(err, comm.ErrUnsupported) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.says)) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		v := []float32{float32(c.Rank() + 1)}
		if err := comm.AllReduce(ctx, c, v, comm.Sum); err != nil {
			return err
		}
		if v[0] != 3 {
			t.Errorf("rank %d: sum after refused calls = %v, want 3", c.Rank(), v[0])
		}
		return c.Err()
	})
}

// TestPointToPoint: tagged messages matched per (peer, tag) in order, a
// message many slots long, zero-length messages, truncation, messages to
// itself, and a SendRecv ring of large messages on every rank at once
// (which would deadlock if both halves blocked in turn).
func TestPointToPoint(t *testing.T) {
	cs := local(t, 3, comm.WithTCPOptions(tcpSmall()))
	n := len(cs)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		next, prev := (r+1)%n, (r+n-1)%n
		// Tags 1 and 2 interleaved on the wire, received in the other
		// order. More messages than slots: a Send may wait for its
		// receiver (as MPI_Send may), so the sends run alongside.
		sent := make(chan error, 1)
		go func() {
			for i := range 3 {
				if err := comm.Send(ctx, c, next, 1, []int32{int32(r), int32(i)}); err != nil {
					sent <- err
					return
				}
				if err := comm.Send(ctx, c, next, 2, []int32{int32(-i)}); err != nil {
					sent <- err
					return
				}
			}
			sent <- comm.Send(ctx, c, next, 3, []int32{})
		}()
		for i := range 3 {
			b := make([]int32, 4)
			k, err := comm.Recv(ctx, c, prev, 2, b)
			if err != nil || k != 1 || b[0] != int32(-i) {
				return fmt.Errorf("tag 2 message %d: %v %v %v", i, k, b, err)
			}
		}
		for i := range 3 {
			b := make([]int32, 2)
			k, err := comm.Recv(ctx, c, prev, 1, b)
			if err != nil || k != 2 || b[0] != int32(prev) || b[1] != int32(i) {
				return fmt.Errorf("tag 1 message %d: %v %v %v", i, k, b, err)
			}
		}
		if k, err := comm.Recv(ctx, c, prev, 3, make([]int32, 1)); err != nil || k != 0 {
			return fmt.Errorf("empty message: %d, %v", k, err)
		}
		if err := <-sent; err != nil {
			return err
		}
		// To itself.
		if err := comm.Send(ctx, c, r, 7, []uint8{1, 2, 3}); err != nil {
			return err
		}
		self := make([]uint8, 3)
		if k, err := comm.Recv(ctx, c, r, 7, self); err != nil || k != 3 || self[2] != 3 {
			return fmt.Errorf("message to itself: %d %v %v", k, self, err)
		}
		// Truncated: consumed whole, the next message still matches.
		go func() {
			if err := comm.Send(ctx, c, next, 4, []uint16{9, 9, 9, 9}); err != nil {
				sent <- err
				return
			}
			sent <- comm.Send(ctx, c, next, 4, []uint16{5})
		}()
		short := make([]uint16, 2)
		if k, err := comm.Recv(ctx, c, prev, 4, short); !errors.Is(err, comm.ErrTruncated) || k != 2 || short[1] != 9 {
			return fmt.Errorf("truncated: %d %v %v", k, short, err)
		}
		if k, err := comm.Recv(ctx, c, prev, 4, short); err != nil || k != 1 || short[0] != 5 {
			return fmt.Errorf("after truncation: %d %v %v", k, short, err)
		}
		if err := <-sent; err != nil {
			return err
		}
		// SendRecv ring, 100 KiB each way: far beyond the slots.
		out := make([]float64, 100<<10/8)
		for i := range out {
			out[i] = float64(r*1000000 + i)
		}
		in := make([]float64, len(out))
		k, err := comm.SendRecv(ctx, c, out, next, 5, in, prev, 5)
		if err != nil || k != len(in) {
			return fmt.Errorf("sendrecv: %d, %v", k, err)
		}
		for i, v := range in {
			if v != float64(prev*1000000+i) {
				return fmt.Errorf("sendrecv element %d = %v from rank %d", i, v, prev)
			}
		}
		// A type mismatch is reported, not misread.
		if err := comm.Send(ctx, c, next, 6, []uint8{1, 2, 3}); err != nil {
			return err
		}
		if _, err := comm.Recv(ctx, c, prev, 6, make([]uint16, 4)); !errors.Is(err, comm.ErrMismatch) {
			return fmt.Errorf("3 bytes into uint16: %v, want ErrMismatch", err)
		}
		return c.Barrier(ctx)
	})
}

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
// turn gives up without sending anything, and the one issued after it
// still waits for the one before it. If it overtook, rank 0's second
// allreduce (2 elements) would meet rank 1's first (1 element) and fail
// with a mismatch.
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
	otherThird := []float32{1, 2}
	if err := comm.AllReduce(ctx, cs[1], other, comm.Sum); err != nil {
		t.Fatalf("rank 1, first: %v", err)
	}
	if err := comm.AllReduce(ctx, cs[1], otherThird, comm.Sum); err != nil {
		t.Fatalf("rank 1, second: %v", err)
	}
	if err := comm.WaitAll(ctx, reqFirst, reqThird); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	if first[0] != 3 || third[0] != 11 || third[1] != 22 || other[0] != 3 || otherThird[1] != 22 {
		t.Errorf("results %v %v on rank 0, %v %v on rank 1; want [3] [11 22]", first, third, other, otherThird)
	}
}
