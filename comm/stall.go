package comm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/probe"
)

// callsKey is where the ranks of this communicator publish their stalled
// calls; the job and each sub-communicator have their own.
func (c *Communicator) callsKey() string { return "calls/" + strconv.FormatUint(c.ext.id, 16) + "/" }

// board is this communicator's page in the store, for the stall probe
// and Close's comparison of the last calls (internal/probe).
func (c *Communicator) board() probe.Board {
	b := probe.Board{Prefix: c.callsKey(), Names: c.names()}
	if c.calls != nil {
		b.Store = c.calls
	}
	return b
}

// probe publishes this rank's last calls and compares them with those
// the other ranks published (see probe.Board.Probe).
func (c *Communicator) probe(ctx context.Context) (mismatch error, at map[int]uint64) {
	return c.board().Probe(ctx, c.g.Recent())
}

// lastCallsAgree compares this rank's last calls, as it closes, with
// those the other ranks publish as they close (publishLast) or while they
// wait in a call (probe). It catches what no rank could see while the
// calls ran: a last broadcast or scatter whose ranks named different
// roots can finish on every rank, each root's sends buffered and never
// read, and each rank with what it believes the result; a rank that
// called one collective more than the others (its peers finished their
// part of a point-to-point exchange or a tree it had no part in, and
// closed); or a mismatch another rank found and published. Only a
// comparison of the calls shows them mismatched. A mismatch found here is
// published, so that the rank left waiting reads why this one went.
func (c *Communicator) lastCallsAgree() error {
	if c.g == nil || c.broken.Load() != nil || c.faulted.Load() || c.stopping.Load() {
		return nil // a rank is lost or this one aborted: no rank to wait for
	}
	err := c.board().CompareLast(c.g.Recent())
	if err != nil {
		if _, read := err.(probe.Told); !read {
			c.publishMismatch(err)
		}
	}
	return err
}

// lossUntold is the error of a Close whose calls all passed here while a
// member of the communicator died or left without closing (see
// probe.Board.LeftUnclosed), or nil: also when a call of this rank failed
// (its error said why), when this rank aborted, or when it made no call.
// A loss the watchdog saw while no call ran waits a moment for the store
// to see the departure behind it.
func (c *Communicator) lossUntold() error {
	if c.g == nil || c.broken.Load() != nil || c.stopping.Load() || collectives.CallNumber(c.g.Recent()) == 0 {
		return nil
	}
	c.faultMu.Lock()
	fault, lost := c.fault, c.lostErr
	c.faultMu.Unlock()
	if fault != nil {
		return nil // the call it failed said so
	}
	var wait time.Duration
	if lost != nil {
		wait = departuresWait
	}
	if err := c.board().LeftUnclosed(c.g.Recent(), wait); err != nil {
		return fmt.Errorf("%s: close: %w", c.names().Prefix(), err)
	}
	return nil
}

// publishFault tells the communicator's other ranks, through the store,
// why this rank is about to drop its links (see probe.Board.PublishFault),
// once: the first reason is the one the others need.
func (c *Communicator) publishFault(mismatch bool, text string) {
	if c.calls == nil || !c.published.CompareAndSwap(false, true) {
		return
	}
	c.board().PublishFault(mismatch, text)
}

// publishMismatch is publishFault for a mismatch this rank found.
func (c *Communicator) publishMismatch(err error) {
	// Said from the finder's side ("this rank called ..."), so that it
	// reads the same on every rank.
	c.publishFault(true, strings.Replace(err.Error(), "this rank", c.names().WhoIs(c.cfg.Rank), 1))
}
