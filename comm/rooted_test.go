package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestRootedVectorAllToAll runs the rooted, vector and all-to-all collectives through the
// public API on 1, 3 and 4 ranks, each with results checked on every rank,
// both blocking and async.
func TestRootedVectorAllToAll(t *testing.T) {
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

// TestRootedVectorBadArguments: bad arguments to these calls are refused
// before anything is sent, naming the fault; the other ranks, which cannot
// see the refusal, are told (see checkRefusalTold).
func TestRootedVectorBadArguments(t *testing.T) {
	ctx := context.Background()
	buf := make([]float32, 8)
	cases := []struct {
		name string
		call func(c *comm.Communicator) error
		says string
	}{
		{"reduce root", func(c *comm.Communicator) error { return comm.Reduce(ctx, c, buf, buf, comm.Sum, 2) }, "root 2"},
		{"reduce recv", func(c *comm.Communicator) error { return comm.Reduce(ctx, c, buf, buf[:3], comm.Sum, 0) }, "len(recv) = 3"},
		{"reduce overlap", func(c *comm.Communicator) error { return comm.Reduce(ctx, c, buf[:4], buf[2:6], comm.Sum, 0) }, "overlap"},
		{"broadcast root", func(c *comm.Communicator) error { return comm.Broadcast(ctx, c, buf, 2) }, "broadcast: root 2 out of range [0, 2)"},
		{"gather root", func(c *comm.Communicator) error { return comm.Gather(ctx, c, buf[:2], buf[2:6], -1) }, "gather: root -1 out of range [0, 2)"},
		{"gather recv", func(c *comm.Communicator) error { return comm.Gather(ctx, c, buf[:2], buf[2:5], 0) },
			"gather: len(recv) = 3 at the root, want Size() x len(send) = 2 x 2"},
		{"gather overlap", func(c *comm.Communicator) error { return comm.Gather(ctx, c, buf[1:3], buf[:4], 0) },
			"gather: send overlaps recv other than at the root's block"},
		{"scatter root", func(c *comm.Communicator) error { return comm.Scatter(ctx, c, buf[:4], buf[4:6], 2) }, "scatter: root 2 out of range [0, 2)"},
		{"scatter send", func(c *comm.Communicator) error { return comm.Scatter(ctx, c, buf[:5], buf[5:7], 0) },
			"scatter: len(send) = 5 at the root, want Size() x len(recv) = 2 x 2"},
		{"scatter overlap", func(c *comm.Communicator) error { return comm.Scatter(ctx, c, buf[:4], buf[1:3], 0) },
			"scatter: recv overlaps send other than at the root's block"},
		{"allgatherv counts", func(c *comm.Communicator) error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:3], []int{1}) }, "len(counts) = 1"},
		{"allgatherv negative", func(c *comm.Communicator) error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:3], []int{1, -1}) }, "counts[1] = -1"},
		{"allgatherv sum", func(c *comm.Communicator) error { return comm.AllGatherV(ctx, c, buf[:1], buf[1:5], []int{1, 2}) }, "sum of counts, 3"},
		{"reducescatterv sum", func(c *comm.Communicator) error {
			return comm.ReduceScatterV(ctx, c, buf[:4], buf[4:5], []int{1, 2}, comm.Sum)
		}, "sum of counts, 3"},
		{"alltoall uneven", func(c *comm.Communicator) error { return comm.AllToAll(ctx, c, buf[:3], buf[3:6]) }, "multiple of Size()"},
		{"alltoall overlap", func(c *comm.Communicator) error { return comm.AllToAll(ctx, c, buf[:4], buf[2:6]) }, "overlap"},
		{"alltoallv self", func(c *comm.Communicator) error {
			return comm.AllToAllV(ctx, c, buf[:1], []int{1, 0}, buf[1:1], []int{0, 0})
		}, "to itself"},
		{"allreducemany overlap", func(c *comm.Communicator) error {
			return comm.AllReduceMany(ctx, c, [][]float32{buf[:3], buf[2:4]}, comm.Sum)
		}, "overlap"},
		{"allreducemany avg ints", func(c *comm.Communicator) error { return comm.AllReduceMany(ctx, c, [][]int8{{1}}, comm.Avg) }, "avg"},
		{"send peer", func(c *comm.Communicator) error { return comm.Send(ctx, c, 2, 0, buf) }, "peer 2"},
		{"recv tag", func(c *comm.Communicator) error { _, err := comm.Recv(ctx, c, 1, -1, buf); return err }, "tag -1"},
		{"sendrecv overlap", func(c *comm.Communicator) error {
			_, err := comm.SendRecv(ctx, c, buf[:4], 1, 0, buf[3:], 1, 0)
			return err
		}, "overlap"},
		{"split color", func(c *comm.Communicator) error { _, err := c.Split(ctx, -5, 0); return err }, "color -5"},
		{"subcommunicator dup", func(c *comm.Communicator) error { _, err := c.SubCommunicator(ctx, []int{0, 0}); return err }, "listed twice"},
		{"subcommunicator range", func(c *comm.Communicator) error { _, err := c.SubCommunicator(ctx, []int{3}); return err }, "rank 3"},
		{"async refused", func(c *comm.Communicator) error { return comm.AllToAllAsync(ctx, c, buf[:3], buf[3:6]).Wait(ctx) }, "multiple of Size()"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := local(t, 2)
			err := tc.call(cs[0])
			if !errors.Is(err, comm.ErrInvalid) && !errors.Is(err, comm.ErrUnsupported) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.says)) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			if strings.HasPrefix(tc.name, "send") || strings.HasPrefix(tc.name, "recv") {
				// Point to point concerns one pair, which both know of
				// the message: the communicator stays usable.
				mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
					return comm.AllReduce(ctx, c, []float32{1}, comm.Sum)
				})
				return
			}
			checkRefusalTold(t, cs, tc.says)
		})
	}
}
