package comm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// checkOneLine asserts what every failed call's error owes its reader:
// one line, short, naming the call and the rank at the root cause (the
// CallError's Culprit, in the communicator's numbering), the chain
// behind it reachable, no story told twice.
func checkOneLine(t *testing.T, who string, err error, culprit int, sentinel error, says ...string) {
	t.Helper()
	var ce *comm.CallError
	if !errors.As(err, &ce) {
		t.Errorf("%s: %v (%T): not a *comm.CallError", who, err, err)
		return
	}
	text := err.Error()
	switch {
	case strings.Contains(text, "\n") || len(text) > 250:
		t.Errorf("%s: %d bytes, want one line of at most 250:\n%s", who, len(text), text)
	case strings.Count(text, "gave up") > 1 || strings.Contains(text, "rendezvous saw") || strings.Contains(text, "departures"):
		t.Errorf("%s: the one line retells the chain: %s", who, text)
	case ce.Culprit != culprit:
		t.Errorf("%s: Culprit = %d, want %d: %s", who, ce.Culprit, culprit, text)
	case ce.Comm == "" && ce.JobCulprit != culprit:
		t.Errorf("%s: JobCulprit = %d, want %d (the job's communicator): %s", who, ce.JobCulprit, culprit, text)
	case !errors.Is(err, sentinel):
		t.Errorf("%s: %v does not match %v", who, err, sentinel)
	case ce.Err == nil:
		t.Errorf("%s: the chain behind %q is not reachable", who, text)
	case !strings.Contains(text, "#"):
		t.Errorf("%s: %q does not name the call", who, text)
	}
	for _, s := range says {
		if !strings.Contains(text, s) {
			t.Errorf("%s: %q does not say %q", who, text, s)
		}
	}
}

// TestCallErrorOneLine: when a rank's failure makes others give up, and
// their giving up makes others give up in turn, every rank's error still
// reads in one line: its call, the rank at the root and what happened
// there (issue 26, case 6: one such chain was 480 bytes long and named
// the rank that timed out first, never the stopped one).
func TestCallErrorOneLine(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, stall timers): beside the other such tests
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr+"/late rank", func(t *testing.T) {
			// Rank 3 comes late: the others time out naming it, and
			// whichever of them loses another first still names rank 3.
			cs := local(t, 4, comm.WithTransport(tr), comm.WithTimeout(400*time.Millisecond))
			// Rank 3 comes once the others have returned (or after 10 s,
			// when they have plainly not timed out).
			var others sync.WaitGroup
			others.Add(3)
			othersDone := make(chan struct{})
			go func() { others.Wait(); close(othersDone) }()
			errs := each(t, cs, func(_ context.Context, c *comm.Communicator) error {
				if c.Rank() == 3 {
					select {
					case <-othersDone:
					case <-time.After(10 * time.Second):
					}
				} else {
					defer others.Done()
				}
				// No deadline, so that GOCOLL_TIMEOUT's applies.
				return comm.AllReduce(context.Background(), c, make([]int32, 5000), comm.Max)
			})
			for r := range 3 {
				checkOneLine(t, "rank "+string(rune('0'+r)), errs[r], 3, comm.ErrTimeout, "allreduce #1", "rank 3 never reached")
			}
		})
		t.Run(tr+"/cancel", func(t *testing.T) {
			cs := local(t, 4, comm.WithTransport(tr), comm.WithTimeout(30*time.Second))
			// Rank 2 cancels while it and ranks 1 and 3 wait in the call
			// for rank 0, which comes once they have all returned.
			done := make(chan struct{}, 3)
			errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				switch c.Rank() {
				case 0:
					for range 3 {
						select {
						case <-done:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return comm.AllReduce(ctx, c, make([]float32, 100000), comm.Sum)
				case 2:
					cctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(300*time.Millisecond, cancel)
					ctx = cctx
				}
				defer func() { done <- struct{}{} }()
				return comm.AllReduce(ctx, c, make([]float32, 100000), comm.Sum)
			})
			checkOneLine(t, "rank 2", errs[2], 2, context.Canceled, "allreduce #2")
			for _, r := range []int{1, 3} {
				checkOneLine(t, "rank "+string(rune('0'+r)), errs[r], 2, comm.ErrPeerLost, "allreduce #2 (algo", "rank 2 gave up")
			}
			// Rank 0 came to the call after the others had given it up.
			checkOneLine(t, "rank 0", errs[0], 2, comm.ErrPeerLost, "allreduce #2", "rank 2 gave up")
		})
	}
}

// TestSubCommunicatorErrorNames: a sub-communicator's errors name it and
// give every rank's job rank beside its rank in it, so the two
// numberings never mix unmarked (issue 26, case 6).
func TestSubCommunicatorErrorNames(t *testing.T) {
	cs := local(t, 4, comm.WithTransport("tcp"), comm.WithTimeout(30*time.Second))
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		sub, err := c.Split(ctx, c.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		// Job ranks 1 and 3 are ranks 0 and 1 of the odd one; job rank
		// 3 aborts it while job rank 1 waits in a call on it.
		if c.Rank() == 3 {
			time.Sleep(100 * time.Millisecond)
			sub.Abort(errors.New("shutting down"))
		}
		if c.Rank()%2 == 0 {
			return sub.Barrier(ctx)
		}
		return comm.AllReduce(ctx, sub, make([]int64, 10), comm.Sum)
	})
	for _, r := range []int{0, 2} {
		if errs[r] != nil {
			t.Errorf("job rank %d, in the even sub-communicator: %v", r, errs[r])
		}
	}
	if !errors.Is(errs[3], comm.ErrAborted) || !strings.Contains(errs[3].Error(), "rank 1 (job rank 3) of split #1 color 1") {
		t.Errorf("job rank 3, which aborted: %v, want ErrAborted naming it as rank 1 (job rank 3) of split #1 color 1", errs[3])
	}
	checkOneLine(t, "job rank 1", errs[1], 1, comm.ErrPeerLost,
		"comm: rank 0 (job rank 1) of split #1 color 1: allreduce #1", "rank 1 (job rank 3) left", "shutting down")
	var ce *comm.CallError
	if errors.As(errs[1], &ce) && (ce.Comm != "split #1 color 1" || ce.Rank != 0 || ce.JobRank != 1 || ce.JobCulprit != 3) {
		t.Errorf("job rank 1: CallError{Comm: %q, Rank: %d, JobRank: %d, JobCulprit: %d}, want split #1 color 1, 0, 1, 3", ce.Comm, ce.Rank, ce.JobRank, ce.JobCulprit)
	}
}

// TestHybridGoodbyeNamesJobRank: over shared memory inside a host and the
// network between hosts, a rank's goodbye reaches the ranks of its host
// through a mesh of that host's ranks alone; it must still name the rank
// by its job rank (it named rank 3 of a job "rank 1", its rank on its
// host).
func TestHybridGoodbyeNamesJobRank(t *testing.T) {
	cs := local(t, 4, comm.WithFakeHosts(2), comm.WithTimeout(30*time.Second))
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		if c.Rank() == 3 {
			// The others wait for it inside the call.
			time.Sleep(50 * time.Millisecond)
			c.Abort(errors.New("operator stop"))
		}
		return comm.AllReduce(ctx, c, make([]float32, 1<<18), comm.Sum)
	})
	var ce *comm.CallError
	if !errors.As(errs[2], &ce) {
		t.Fatalf("rank 2: %v, want a *comm.CallError", errs[2])
	}
	chain := ce.Err.Error()
	if strings.Contains(chain, "rank 1 gave up") || !strings.Contains(chain, "rank 3 gave up") && !strings.Contains(ce.Error(), "rank 3") {
		t.Errorf("rank 2, on rank 3's host: the goodbye names rank 3 by another number: %s\nchain: %s", ce, chain)
	}
	checkOneLine(t, "rank 2", errs[2], 3, comm.ErrPeerLost, "operator stop")
}
