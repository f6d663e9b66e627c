package watch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/internal/probe"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

var token = []byte("watch-test-token")

// comm is the communicator side of a watchdog under test: a call that
// runs or not, and a record of what the watchdog did to it.
type comm struct {
	mu       sync.Mutex
	running  bool
	bounded  bool
	mismatch error // what Probe finds
	absent   string
	failed   chan error // Fail
	lost     chan error // Lost
	publish  []error
	stalls   int
	observed int
}

func newComm(running bool) *comm {
	return &comm{running: running, failed: make(chan error, 4), lost: make(chan error, 4)}
}

func (c *comm) Running() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return 6, c.running
}
func (c *comm) Bounded(turn uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bounded && turn == 6
}
func (c *comm) Observe(time.Time, bool) { c.mu.Lock(); c.observed++; c.mu.Unlock() }
func (c *comm) Probe() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mismatch
}
func (c *comm) Absent() string { return c.absent }
func (c *comm) PublishMismatch(err error) {
	c.mu.Lock()
	c.publish = append(c.publish, err)
	c.mu.Unlock()
}
func (c *comm) Stalled(time.Time) { c.mu.Lock(); c.stalls++; c.mu.Unlock() }
func (c *comm) Fail(err error)    { c.failed <- err }
func (c *comm) Lost(err error)    { c.lost <- err }

// run starts w and returns a function that ends it (as Close does) and
// says whether Run returned.
func run(t *testing.T, w Watchdog) (closeIt func(), ended <-chan struct{}) {
	t.Helper()
	closed := make(chan struct{})
	if w.Closed == nil {
		w.Closed = closed
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run()
	}()
	var once sync.Once
	closeIt = func() { once.Do(func() { close(closed) }) }
	t.Cleanup(func() {
		closeIt()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the watchdog did not end when its communicator closed")
		}
	})
	return closeIt, done
}

func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("the watchdog never called %s", what)
		return nil
	}
}

// mesh is n real TCP transports over a real store, with rank 0 linked
// to every other rank by a message each way, and each rank's store
// connection, joined as its rank.
func mesh(t *testing.T, n int) ([]*tcp.Transport, []*bootstrap.Client) {
	t.Helper()
	stores := make([]*bootstrap.Client, n)
	ts := conformance.Job(t, n, token, func(ctx context.Context, store *bootstrap.Client, r int) (*tcp.Transport, error) {
		stores[r] = store
		if err := store.Join(ctx, r, n, ""); err != nil {
			return nil, err
		}
		return tcp.Connect(ctx, store, r, n, token, tcp.Options{})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := ts[0].Send(ctx, r, []byte("hi")); err != nil {
				t.Error(err)
				return
			}
			m, err := ts[0].Recv(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			ts[0].Release(m)
		}()
		go func() {
			defer wg.Done()
			m, err := ts[r].Recv(ctx, 0)
			if err != nil {
				t.Error(err)
				return
			}
			ts[r].Release(m)
			if err := ts[r].Send(ctx, 0, []byte("hi")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Rank 0 waits to hear from each peer, as a running collective
	// would: TCP notices a loss on a link a call reads.
	rctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	for r := 1; r < n; r++ {
		go ts[0].Recv(rctx, r)
	}
	return ts, stores
}

// TestPeerLost: a peer whose links drop fails the running collective
// with an error naming it, and the watchdog's work is done; with no
// collective running, the loss is kept for the next one and the watch
// goes on until the communicator closes.
func TestPeerLost(t *testing.T) {
	for _, running := range []bool{true, false} {
		t.Run(fmt.Sprint("running=", running), func(t *testing.T) {
			ts, stores := mesh(t, 2)
			c := newComm(running)
			closeIt, ended := run(t, Watchdog{Comm: c, Links: ts[0], Store: stores[0], Names: blame.Names{Rank: 0, Size: 2}})
			transport.Abort(ts[1], errors.New("simulated death"))
			var err error
			if running {
				err = waitErr(t, c.failed, "Fail")
			} else {
				err = waitErr(t, c.lost, "Lost")
			}
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 1 {
				t.Fatalf("%v: want ErrPeerLost naming peer 1", err)
			}
			if running {
				select {
				case <-ended:
				case <-time.After(5 * time.Second):
					t.Fatal("the watchdog went on after failing the collective")
				}
				return
			}
			select {
			case <-ended:
				t.Fatal("the watchdog ended on a loss while no collective ran")
			case <-time.After(100 * time.Millisecond):
			}
			closeIt()
			<-ended
		})
	}
}

// TestMismatchFirst: a rank that found a mismatch dropped its links; the
// loss that follows fails the call with the mismatch as its cause, and
// the loss still matches.
func TestMismatchFirst(t *testing.T) {
	c := newComm(true)
	c.mismatch = fmt.Errorf("rank 1 called broadcast root 1, this rank broadcast root 0: %w", collectives.ErrMismatch)
	ts, _ := mesh(t, 2)
	// No store: the watchdog does not tick, so only the loss can tell.
	run(t, Watchdog{Comm: c, Links: ts[0], Names: blame.Names{Rank: 0, Size: 2}})
	transport.Abort(ts[1], errors.New("mismatch"))
	err := waitErr(t, c.failed, "Fail")
	if !errors.Is(err, collectives.ErrMismatch) || !errors.Is(err, transport.ErrPeerLost) || err.Error() != c.mismatch.Error() {
		t.Fatalf("%v: want the mismatch, reading as itself, matching the loss too", err)
	}
}

// TestElasticMembers: on an elastic communicator only the losses of its
// own members count, and a member the store saw die fails the running
// call though no link to it broke.
func TestElasticMembers(t *testing.T) {
	ts, stores := mesh(t, 3)
	// A communicator of job ranks 0 and 1 (rank 2 was shrunk away):
	// rank 2's death is not its business.
	c := newComm(true)
	names := blame.Names{Comm: "shrink #1", Rank: 0, Size: 2, Members: jobRanks{0, 1}}
	run(t, Watchdog{Comm: c, Links: ts[0], Elastic: true, Members: ts[0], Store: stores[0], Names: names})
	transport.Abort(ts[2], errors.New("simulated death"))
	stores[2].Close()
	select {
	case err := <-c.failed:
		t.Fatalf("a non-member's loss failed the call: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// Job rank 1 dies as far as the store sees (its rendezvous
	// connection ends without a goodbye); its link is still up.
	stores[1].Close()
	err := waitErr(t, c.failed, "Fail")
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "the rendezvous saw it die") {
		t.Fatalf("%v: want ErrPeerLost naming job rank 1 as the rendezvous saw it", err)
	}
}

type jobRanks []int

func (j jobRanks) Size() int         { return len(j) }
func (j jobRanks) JobRank(r int) int { return j[r] }

// TestLeavers: the store's word that a rank left, with the links lost
// meanwhile, fails the running call.
func TestLeavers(t *testing.T) {
	ts, _ := mesh(t, 2)
	c := newComm(true)
	leavers := make(chan error, 1)
	run(t, Watchdog{Comm: c, Links: ts[0], Leavers: leavers, Names: blame.Names{Rank: 0, Size: 2}})
	gone := fmt.Errorf("%w: rank 1 left the job: out of memory", transport.ErrPeerLost)
	leavers <- gone
	err := waitErr(t, c.failed, "Fail")
	if !errors.Is(err, gone) {
		t.Fatalf("%v: want the store's word", err)
	}
}

// TestTimeout: a call without a deadline of its own fails after Timeout
// with sentinel.Timeout and context.DeadlineExceeded, saying whom it
// waited for; one with a deadline is left to it.
func TestTimeout(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprint("bounded=", bounded), func(t *testing.T) {
			c := newComm(true)
			c.bounded = bounded
			c.absent = " (rank 3 never reached it)"
			start := time.Now()
			run(t, Watchdog{Comm: c, Timeout: 100 * time.Millisecond, Names: blame.Names{Rank: 0, Size: 4}})
			if bounded {
				select {
				case err := <-c.failed:
					t.Fatalf("a call with a deadline of its own failed: %v", err)
				case <-time.After(400 * time.Millisecond):
				}
				return
			}
			err := waitErr(t, c.failed, "Fail")
			if took := time.Since(start); took < 100*time.Millisecond {
				t.Errorf("failed after %v, before the timeout", took)
			}
			if !errors.Is(err, sentinel.Timeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "GOCOLL_TIMEOUT) while its context had no deadline (rank 3 never reached it)") {
				t.Fatalf("%v: want the timeout, naming the rank waited for", err)
			}
		})
	}
}

// TestProbeAndStall: a call that waits is probed; a mismatch found
// fails it and is published unless another rank published it (Told);
// a stall report is asked for once per call.
func TestProbeAndStall(t *testing.T) {
	ts, stores := mesh(t, 2)
	for _, told := range []bool{false, true} {
		c := newComm(true)
		found := fmt.Errorf("rank 1 called barrier, this rank allreduce: %w", collectives.ErrMismatch)
		if told {
			b := probe.Board{Store: stores[1], Prefix: "calls/0/", Names: blame.Names{Rank: 1, Size: 2}}
			b.PublishFault(true, "rank 1 called barrier, rank 0 allreduce")
			mine := (probe.Board{Store: stores[0], Prefix: "calls/0/", Names: blame.Names{Rank: 0, Size: 2}})
			// A rank in no call yet reads the fault all the same.
			c.mismatch, _ = mine.Probe(context.Background(), []byte{})
			if _, ok := c.mismatch.(probe.Told); !ok {
				t.Fatalf("the published fault reads as %v, want a probe.Told", c.mismatch)
			}
		} else {
			c.mismatch = found
		}
		_, ended := run(t, Watchdog{Comm: c, Links: ts[0], Store: stores[0], Stall: 10 * time.Millisecond, Names: blame.Names{Rank: 0, Size: 2}})
		err := waitErr(t, c.failed, "Fail")
		<-ended
		if !errors.Is(err, collectives.ErrMismatch) {
			t.Fatalf("%v: want the mismatch", err)
		}
		c.mu.Lock()
		if told != (len(c.publish) == 0) {
			t.Errorf("told=%v: published %v", told, c.publish)
		}
		stalls, observed := c.stalls, c.observed
		c.mu.Unlock()
		// The probe is due 40 ms into the call, the stall report
		// 10 ms in: asked for once, though the call went on waiting.
		if stalls != 1 {
			t.Errorf("%d stall reports asked for, want one", stalls)
		}
		if observed == 0 {
			t.Error("no tick was observed")
		}
	}
}
