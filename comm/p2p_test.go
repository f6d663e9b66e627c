package comm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

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
