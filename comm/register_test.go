package comm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestRegister: registering is accepted on every transport (and does
// nothing where the transport copies anyway), collectives on registered
// buffers give the right results, and bad registrations are refused.
func TestRegister(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx := context.Background()
			cs, err := comm.NewLocal(ctx, 2, comm.WithTransport(tr))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := comm.Register(cs[0], []float32{}); !errors.Is(err, comm.ErrInvalid) {
				t.Errorf("Register of an empty buffer: %v, want ErrInvalid", err)
			}
			if _, err := comm.Register[float32](nil, make([]float32, 4)); !errors.Is(err, comm.ErrInvalid) {
				t.Errorf("Register on a nil communicator: %v, want ErrInvalid", err)
			}
			bufs := make([][]float64, 2)
			errs := make([]error, 2)
			onEveryRank(cs, func(c *comm.Communicator) {
				r := c.Rank()
				bufs[r] = make([]float64, 1<<17)
				reg, err := comm.Register(c, bufs[r])
				if err != nil {
					errs[r] = err
					return
				}
				for i := range bufs[r] {
					bufs[r][i] = float64(i + r)
				}
				errs[r] = errors.Join(comm.AllReduce(ctx, c, bufs[r], comm.Sum), reg.Close(), reg.Close())
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, b := range bufs {
				for i, v := range b {
					if v != float64(2*i+1) {
						t.Fatalf("rank %d: element %d is %v, want %v", r, i, v, 2*i+1)
					}
				}
			}
			onEveryRank(cs, func(c *comm.Communicator) { c.Close() })
			if _, err := comm.Register(cs[0], make([]int32, 8)); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("Register after Close: %v, want ErrClosed", err)
			}
		})
	}
}
