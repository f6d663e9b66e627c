package comm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestRecordsCallNeverNumbered: a call that fails before it is numbered
// (given up before it started, which breaks the communicator) leaves the
// call before it as it ended, returned and not running, and the next
// failed call numbered is the one marked failed. Before, the latest
// record of a broken communicator was marked failed whatever it did: the
// "#28 failed, but it returned nil, and #29 never started" seen at load.
func TestRecordsCallNeverNumbered(t *testing.T) {
	cs := local(t, 2)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		return comm.AllReduce(ctx, c, []float64{1}, comm.Sum)
	})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := comm.AllReduce(gone, cs[0], []float64{1}, comm.Sum); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a cancelled context: %v", err)
	}
	recs := cs[0].Records()
	if len(recs) != 1 || recs[0].Seq != 1 || recs[0].Failed || recs[0].Running {
		t.Fatalf("records %+v, want call #1 alone, neither failed nor running", recs)
	}
	if err := cs[0].Barrier(context.Background()); !errors.Is(err, comm.ErrBroken) {
		t.Fatalf("barrier on the broken communicator: %v, want ErrBroken", err)
	}
	if recs := cs[0].Records(); len(recs) != 1 || recs[0].Failed {
		t.Errorf("after a refused barrier: %+v", recs)
	}
}

// TestRecordsFailedCall: a call that began and failed is marked failed,
// and the calls before it are not.
func TestRecordsFailedCall(t *testing.T) {
	cs := local(t, 2)
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		return comm.AllReduce(ctx, c, []float64{1}, comm.Sum)
	})
	comm.Die(cs[1])
	if err := comm.AllReduce(context.Background(), cs[0], make([]float64, 1000), comm.Sum); err == nil {
		t.Fatal("an allreduce with a dead peer succeeded")
	}
	recs := cs[0].Records()
	if len(recs) == 0 || recs[0].Failed {
		t.Fatalf("records %+v: call #1 returned, must not be failed", recs)
	}
	if last := recs[len(recs)-1]; len(recs) == 2 && (!last.Failed || last.Running) {
		t.Errorf("call #2 began and failed: %+v", last)
	}
}
