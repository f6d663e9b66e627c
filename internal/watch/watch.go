// Package watch is a communicator's watchdog: the goroutine that turns
// what a running collective cannot see from where it waits into the
// error that fails it, and so breaks the communicator. It watches for a
// peer lost anywhere in the job (the transport's word, or, on an elastic
// communicator, the losses among its own members and the departures the
// rendezvous store saw), for the store's word that a rank left (Leavers),
// for a call that runs longer than the timeout while its context has no
// deadline, and for a mismatch only the stall probe shows (every rank
// waits to receive); it asks for a stall report once a call has waited
// GOCOLL_STALL. Watching from here keeps the cost off the collectives:
// they only take a ticket.
//
// Package comm runs one Watchdog per communicator; the watchdog reads
// and acts on it through Comm, so it never holds a *Communicator.
package watch

import (
	"context"
	"fmt"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/probe"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
)

// Comm is the communicator a Watchdog watches: what it asks of it and
// what it does to it.
type Comm interface {
	// Running is the ticket of the collective running now, and whether
	// one runs.
	Running() (turn uint64, running bool)
	// Bounded says the collective of ticket turn has a deadline of its
	// own: the watchdog leaves it to that deadline.
	Bounded(turn uint64) bool
	// Observe is a tick's bookkeeping: what the communicator is doing
	// (for stall reports and Stats) and its trace.
	Observe(now time.Time, running bool)
	// Probe publishes this rank's last calls in the store and compares
	// them with the other ranks': a mismatch found (a probe.Told if
	// another rank found and published it), or nil.
	Probe() error
	// Absent names the ranks a timed-out call still waits for (see
	// probe.Board.Absent): "" or text to append to the error.
	Absent() string
	// PublishMismatch tells the other ranks a mismatch this rank found.
	PublishMismatch(err error)
	// Stalled asks for a stall report: the running call waited longer
	// than Watchdog.Stall.
	Stalled(now time.Time)
	// Fail fails the running collective with err: it wakes it, and the
	// peers learn of it.
	Fail(err error)
	// Lost records err, a peer lost while no collective ran, for the
	// next one.
	Lost(err error)
}

// Departures is the part of the rendezvous client (bootstrap.Client) the
// watchdog asks, on an elastic communicator, who left the job.
type Departures interface {
	Departures(ctx context.Context, wait time.Duration) ([]bootstrap.Departure, error)
}

// Watchdog is what one communicator's watchdog watches.
type Watchdog struct {
	Comm Comm
	// Closed and Aborted end the watch (the communicator's Close and
	// Abort).
	Closed, Aborted <-chan struct{}
	// Leavers carries the store's word that a rank left the job
	// abnormally, for a transport not linked to every rank; nil if none.
	Leavers <-chan error
	// Links is the communicator's transport, if it tells of lost peers.
	Links transport.LossNotifier
	// Elastic: a failure ends this communicator alone (see comm's
	// Shrink). Links' Lost says only when the first peer of the job
	// goes, which a communicator shrunk after it must ignore: the
	// watchdog looks instead, on every tick, for losses among the
	// communicator's members (Names) on Members, the job's shared
	// transport, and, while a call runs, for departures in Store.
	Elastic bool
	Members transport.LossNotifier
	// Names numbers the communicator's ranks in the job.
	Names blame.Names
	// Store is the job's store; nil for a job without one (then the
	// watchdog ticks only to enforce Timeout).
	Store Departures
	// Timeout bounds a collective whose context has no deadline (0:
	// none); Stall is when a stall report is asked for (0: never).
	Timeout, Stall time.Duration
}

// tick is the watchdog's period while a store is there: it bounds how
// late a stall probe starts.
const tick = 20 * time.Millisecond

// lossSettle is how long the watchdog lets further losses arrive after
// the first, before it fails the running collective.
const lossSettle = 20 * time.Millisecond

// departuresEvery is how often an elastic communicator's watchdog asks
// the store, while a call runs, whether one of its members has left.
const departuresEvery = 100 * time.Millisecond

// Run watches until the communicator is closed or aborted, or the
// watchdog failed a collective for good.
func (w Watchdog) Run() {
	var lost <-chan struct{}
	if w.Links != nil && !w.Elastic {
		lost = w.Links.Lost()
	}
	members := w.Members
	if !w.Elastic {
		members = nil
	}
	var departuresSeen time.Time
	var ticks <-chan time.Time
	if w.Timeout > 0 || w.Store != nil {
		period := tick
		if w.Timeout > 0 && w.Store == nil {
			period = min(max(w.Timeout/20, 10*time.Millisecond), time.Second)
		}
		t := time.NewTicker(period)
		defer t.Stop()
		ticks = t.C
	}
	var probing probe.Schedule
	// The collective seen running on the last tick (1 + its ticket; 0
	// for none), and since when: the collectives store nothing for this,
	// as reading the clock would cost them more than the rest of a small
	// one's bookkeeping.
	var seen, reported uint64 // reported: the call a stall report was asked for
	var since time.Time
	for {
		select {
		case <-w.Closed:
			return
		case <-w.Aborted:
			return
		case err := <-w.Leavers:
			// The store saw a rank leave that this rank may have no link
			// to. Let the links that did break say so first, as below.
			if !w.settle() {
				return
			}
			if w.Links != nil && w.Links.LostErr() != nil {
				err = fmt.Errorf("%w (also lost: %w)", err, w.Links.LostErr())
			}
			if w.peerLost(err) {
				return
			}
		case <-lost:
			lost = nil
			// A rank that gave up because another died resets its links
			// at about the time the dead rank's links end: wait a moment
			// for those too, so that the error names the rank that died,
			// not only the first link to go.
			if !w.settle() {
				return
			}
			if w.peerLost(w.Links.LostErr()) {
				return
			}
		case now := <-ticks:
			if members != nil {
				err := w.memberLoss(members)
				if _, running := w.Comm.Running(); err == nil && running && now.Sub(departuresSeen) >= departuresEvery {
					// A death no link reports at once (over RDMA a
					// dead peer's queue pair fails only once its
					// retries run out), the store saw at once.
					departuresSeen = now
					err = w.memberDeparted()
				}
				if err != nil {
					members = nil
					if w.peerLost(err) {
						return
					}
				}
			}
			turn, running := w.Comm.Running()
			if !running {
				seen = 0
			} else if turn+1 != seen {
				seen, since, probing = turn+1, now, probe.Schedule{}
			}
			w.Comm.Observe(now, running)
			if running && w.Stall > 0 && reported != seen && now.Sub(since) > w.Stall {
				reported = seen
				w.Comm.Stalled(now)
			}
			if running && probing.Due(now.Sub(since)) {
				if mm := w.Comm.Probe(); mm != nil {
					if _, read := mm.(probe.Told); !read {
						w.Comm.PublishMismatch(mm)
					}
					w.Comm.Fail(mm)
					return
				}
			}
			if running && w.Timeout > 0 && !w.Comm.Bounded(turn) && now.Sub(since) > w.Timeout {
				w.Comm.Fail(fmt.Errorf("%w: a collective ran longer than %v (GOCOLL_TIMEOUT) while its context had no deadline%s: %w",
					sentinel.Timeout, w.Timeout, w.Comm.Absent(), context.DeadlineExceeded))
				return
			}
		}
	}
}

// settle waits lossSettle for further losses to arrive; false if the
// communicator ended meanwhile.
func (w Watchdog) settle() bool {
	select {
	case <-w.Closed:
		return false
	case <-w.Aborted:
		return false
	case <-time.After(lossSettle):
		return true
	}
}

// peerLost is the watchdog's answer to err, a peer lost: the running
// collective fails with it (peerLost reports true: the watchdog's work
// is done), or, if none runs, the next one.
func (w Watchdog) peerLost(err error) bool {
	// A rank that found a call mismatched dropped its links: say so,
	// rather than only that it is gone.
	if mm := w.Comm.Probe(); mm != nil {
		err = blame.Also(mm, err)
	}
	if _, running := w.Comm.Running(); running {
		w.Comm.Fail(err)
		return true
	}
	w.Comm.Lost(err)
	return false
}

// memberLoss is the losses among the communicator's members the shared
// transport has seen, or nil. The transport says when its first peer is
// lost, once; a communicator shrunk after that loss must react only to
// losses of its own members.
func (w Watchdog) memberLoss(ln transport.LossNotifier) error {
	var mine transport.Losses
	for _, pe := range blame.Lost(ln.LostErr()) {
		if w.Names.FromJob(pe.Peer) >= 0 {
			mine = append(mine, pe)
		}
	}
	switch len(mine) {
	case 0:
		return nil
	case 1:
		return mine[0]
	}
	return mine
}

// memberDeparted is a loss naming the first member the rendezvous store
// saw leave the job abnormally, or nil.
func (w Watchdog) memberDeparted() error {
	if w.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*departuresEvery)
	defer cancel()
	ds, err := w.Store.Departures(ctx, 0)
	if err != nil {
		return nil
	}
	for _, d := range ds {
		if w.Names.FromJob(d.Rank) >= 0 && d.Rank != w.Names.JobRank(w.Names.Rank) {
			return &transport.PeerError{Peer: d.Rank, Op: "wait for",
				Err: fmt.Errorf("%w: the rendezvous saw it %s", transport.ErrPeerLost, d.Why)}
		}
	}
	return nil
}
