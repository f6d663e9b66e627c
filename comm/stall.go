package comm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/probe"
)

// board is this communicator's page in the store, for the stall probe
// and Close's comparison of the last calls (internal/probe): the job and
// each sub-communicator have their own, under "calls/<id>/".
func (c *Communicator) board() probe.Board {
	b := probe.Board{Prefix: "calls/" + strconv.FormatUint(c.ext.id, 16) + "/", Names: c.names()}
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

// lastCallsAgree is what Close has to tell its caller about the calls
// made here, as Close's error, or nil. While no fault is known here, it
// compares this rank's last calls, as it closes, with those the other
// ranks publish as they close (publishLast) or while they wait in a call
// (probe). That catches what no rank could see while the calls ran: a
// last broadcast or scatter whose ranks named different roots can finish
// on every rank, each root's sends buffered and never read, and each rank
// with what it believes the result; a rank that called one collective
// more than the others (its peers finished their part of a
// point-to-point exchange or a tree it had no part in, and closed); or a
// mismatch another rank found and published. Only a comparison of the
// calls shows them mismatched. A mismatch found here is published, so
// that the rank left waiting reads why this one went. Then, or on a
// communicator a fault broke, comes what no call here reported (untold).
func (c *Communicator) lastCallsAgree() error {
	if c.g == nil || c.stopping.Load() {
		return nil // this one aborted: no rank to wait for
	}
	faulted := c.broken.Load() != nil || c.faulted.Load()
	var err error
	if !faulted {
		err = c.board().CompareLast(c.g.Recent(), c.closeBound())
		if _, read := err.(probe.Told); err != nil && !read && !errors.Is(err, ErrUnconfirmed) {
			// Not an unconfirmed call: that is no mismatch the others
			// should fail with.
			c.publishMismatch(err)
		}
	}
	if err == nil {
		err = c.untold(faulted)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrMismatch) && !errors.Is(err, ErrUnconfirmed):
		return fmt.Errorf("%s: close: the last calls did not match: %w", c.names().Prefix(), err)
	}
	return fmt.Errorf("%s: close: %w", c.names().Prefix(), err)
}

// untold is the failure of the communicator that no call of this rank
// reported, all of them having returned nil, or nil: a call of
// this rank that failed said why, and a rank that made no call has
// nothing to be told. Two failures are untold:
//
//   - A mismatch that broke the communicator (ErrMismatch), when Close
//     found it faulted and so compared no last calls. A peer that found
//     this rank's latest call mismatched drops its links; the watchdog
//     here, seeing them go while the call ran or after, records the
//     mismatch the peer published before it dropped them, but a call
//     whose part here was done (a root's buffered sends) still returns
//     nil. The store is read again in case the watchdog's read came
//     first.
//   - A member that died or left without closing (ErrPeerLost, see
//     probe.Board.LeftUnclosed) while no call of this rank failed and no
//     fault was found in one. A loss the watchdog saw while no call ran
//     waits a moment for the store to see the departure behind it.
//
// A loss with a mismatch behind it is the mismatch.
func (c *Communicator) untold(faulted bool) error {
	c.faultMu.Lock()
	fault, lost := c.fault, c.lostErr
	c.faultMu.Unlock()
	if faulted && c.endedOK.Load() {
		found := []error{fault, lost}
		if b := c.broken.Load(); b != nil {
			found = append(found, *b)
		}
		for _, err := range found {
			if errors.Is(err, ErrMismatch) {
				return err
			}
		}
		if mm, _ := c.probe(context.Background()); errors.Is(mm, ErrMismatch) {
			return mm
		}
	}
	if c.broken.Load() != nil || fault != nil || collectives.CallNumber(c.g.Recent()) == 0 {
		return nil
	}
	var wait time.Duration
	if lost != nil {
		wait = departuresWait
	}
	return c.board().LeftUnclosed(c.g.Recent(), wait)
}

// closeBound is how long Close waits for the other ranks' last calls
// (and, in the rank holding the store, for their comparisons): the
// communicator's timeout, as for a collective, since Close is one.
func (c *Communicator) closeBound() time.Duration {
	if c.timeout > 0 {
		return c.timeout
	}
	return DefaultTimeout
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
