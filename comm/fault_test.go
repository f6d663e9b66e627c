package comm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestAbort: Abort from another goroutine wakes the rank's pending call,
// fails its later calls, and makes the peers waiting on it fail naming it.
func TestAbort(t *testing.T) {
	cs := local(t, 3)
	reason := errors.New("checkpoint write failed")
	time.AfterFunc(100*time.Millisecond, func() { cs[1].Abort(reason) })
	start := time.Now()
	// Rank 0 never joins, so ranks 1 and 2 wait until the abort.
	errs := each(t, cs[1:], func(ctx context.Context, c *comm.Communicator) error {
		return comm.AllReduce(ctx, c, make([]float32, 4096), comm.Sum)
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("abort took %v to wake the calls", d)
	}
	if err := errs[0]; !errors.Is(err, comm.ErrAborted) || !errors.Is(err, reason) || !strings.Contains(err.Error(), "allreduce") {
		t.Errorf("aborted rank: err = %v, want ErrAborted wrapping the reason, naming the collective", err)
	}
	if err := errs[1]; !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), reason.Error()) {
		t.Errorf("rank 2: err = %v, want ErrPeerLost naming rank 1 and its reason", err)
	}
	if err := cs[1].Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) || !errors.Is(err, reason) {
		t.Errorf("call after Abort: %v, want ErrAborted wrapping the reason", err)
	}
	if err := cs[1].Err(); !errors.Is(err, comm.ErrAborted) {
		t.Errorf("Err after Abort = %v, want ErrAborted", err)
	}
	// Rank 0 arrives late and finds rank 1 gone.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := comm.AllReduce(ctx, cs[0], make([]float32, 4096), comm.Sum); !errors.Is(err, comm.ErrPeerLost) {
		t.Errorf("rank 0 after the abort: %v, want ErrPeerLost", err)
	}
	cs[1].Abort(errors.New("second abort")) // ignored
	if err := cs[1].Err(); !errors.Is(err, reason) {
		t.Errorf("a second Abort replaced the first reason: %v", err)
	}
}

// TestAbortIdle: Abort with nothing pending, and a nil reason.
func TestAbortIdle(t *testing.T) {
	cs := local(t, 2)
	cs[0].Abort(nil)
	err := cs[0].Barrier(context.Background())
	if !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "no reason given") {
		t.Errorf("err = %v, want ErrAborted saying no reason was given", err)
	}
	var nilComm *comm.Communicator
	nilComm.Abort(errors.New("x")) // must not panic
}

// TestDefaultTimeout: a collective whose ctx has no deadline is bounded by
// WithTimeout (GOCOLL_TIMEOUT), returns ErrTimeout and DeadlineExceeded,
// and leaves the communicator broken.
func TestDefaultTimeout(t *testing.T) {
	cs := local(t, 2, comm.WithTimeout(300*time.Millisecond))
	start := time.Now()
	err := cs[1].Barrier(context.Background()) // rank 0 never comes
	d := time.Since(start)
	if !errors.Is(err, comm.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("returned after %v, want about 300ms", d)
	}
	if err := cs[1].Barrier(context.Background()); !errors.Is(err, comm.ErrBroken) || !errors.Is(err, comm.ErrTimeout) {
		t.Errorf("after the timeout: %v, want ErrBroken wrapping ErrTimeout", err)
	}
}

// TestTimeoutSparesDeadlines: the communicator's timeout bounds only
// collectives whose ctx has no deadline. One with a deadline past the
// timeout runs until its own deadline; and having run one does not spare
// the next collective, which has none.
func TestTimeoutSparesDeadlines(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, stall timers): beside the other such tests
	const timeout = 200 * time.Millisecond
	t.Run("own deadline", func(t *testing.T) {
		cs := local(t, 2, comm.WithTimeout(timeout))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := cs[1].Barrier(ctx) // rank 0 never comes
		d := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if d < 1400*time.Millisecond {
			t.Errorf("returned after %v: the %v timeout cut short a call whose ctx had 1.5s", d, timeout)
		}
	})
	t.Run("next call", func(t *testing.T) {
		cs := local(t, 2, comm.WithTimeout(timeout))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Barrier(ctx); err != nil {
					t.Errorf("rank %d: barrier with a deadline: %v", c.Rank(), err)
				}
			}()
		}
		wg.Wait()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- cs[1].Barrier(context.Background()) }() // rank 0 never comes
		select {
		case err := <-done:
			if !errors.Is(err, comm.ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
			if d := time.Since(start); d < timeout {
				t.Errorf("returned after %v, before the %v timeout", d, timeout)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a collective without a deadline, after one with a deadline, outlived the timeout by 10s")
		}
	})
}

// TestAbortRace: Abort and Close racing with running collectives on every
// rank, many times; under -race this checks the bookkeeping, and every
// call must end.
func TestAbortRace(t *testing.T) {
	for i := 0; i < 10; i++ {
		cs := local(t, 3)
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for j := 0; j < 50; j++ {
					if err := comm.AllReduce(ctx, c, make([]int32, 1000), comm.Sum); err != nil {
						if ctx.Err() != nil {
							t.Errorf("rank %d: hung until the deadline: %v", c.Rank(), err)
						}
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(i) * time.Millisecond)
		cs[i%3].Abort(errors.New("stop"))
		wg.Wait()
	}
}

// TestUnlinkedRankLoss: over TCP with links made on demand, and over
// RDMA with queue pairs made on demand where there is a device
// (GOCOLL_IB_DEV, which vmtest/run sets), rank 0 holds no link to rank 3
// (Init links recursive doubling's partners: 1 and 2 of 4). When rank 3
// gives up while rank 0 waits in a collective on idle ranks that are
// alive, no link of rank 0's can tell it; the store's departures must,
// as a link to rank 3 would have. Eager links are the reference.
func TestUnlinkedRankLoss(t *testing.T) {
	transports := []string{"tcp"}
	if os.Getenv("GOCOLL_IB_DEV") != "" {
		transports = append(transports, "rdma")
	}
	for _, tr := range transports {
		for _, mode := range []string{"lazy", "eager"} {
			t.Run(tr+"/"+mode, func(t *testing.T) { unlinkedRankLoss(t, tr, mode) })
		}
	}
}

func unlinkedRankLoss(t *testing.T, tr, mode string) {
	t.Setenv("GOCOLL_"+strings.ToUpper(tr)+"_CONNECT", mode)
	cs := local(t, 4, comm.WithTransport(tr))
	reason := errors.New("out of disk")
	time.AfterFunc(200*time.Millisecond, func() { cs[3].Abort(reason) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := comm.AllReduce(ctx, cs[0], make([]float32, 16), comm.Sum)
	if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 3") {
		t.Fatalf("rank 0: %v, want ErrPeerLost naming rank 3", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("rank 0 learned after %v, want within moments", d)
	}
}
