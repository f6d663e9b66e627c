package comm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/wiring"
)

// withDepartures adds to err what the store saw of ranks that left the job
// abnormally. The store saw every rank's rendezvous connection: it knows
// who died even when no link of ours could tell (a death hidden behind
// data not yet read, a rank that gave up mid-frame, a rank that died
// before it connected).
//
// A sub-communicator asks the job's store (its calls) for what it has
// seen by now, without waiting: a loss it sees through the job's shared
// links is most often a relay (a rank whose job's communicator failed
// dropped them, quoting the job's ranks), and only the store's record
// names the rank at the root of it as every member sees it.
func (c *Communicator) withDepartures(err error) error {
	store, wait := c.store, departuresWait
	if store == nil {
		store, wait = c.calls, 0
	}
	if store == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), departuresWait+time.Second)
	ds, derr := store.Departures(ctx, wait)
	cancel()
	switch {
	case derr != nil && (errors.Is(derr, context.DeadlineExceeded) || errors.Is(derr, context.Canceled)):
		// Our own request to the store was cut short by the deadline,
		// which left that connection unusable: the store is not at fault.
		return err
	case derr != nil:
		return fmt.Errorf("%w (rendezvous unreachable too: %v)", err, derr)
	case len(ds) > 0:
		return blame.Departed{Err: err, Departures: ds}
	}
	return err
}

// tellLeavers passes on to the watchdog (on c.leavers) the first rank
// of ds, the store's departures, other than this one, and reports
// whether there was one. With links made on demand (TCP, shm), a rank holds
// links to few peers: the death of one it has no link to would otherwise
// reach it only through a chain of ranks that gave up one after another,
// or when it next needed that rank. Asking the store keeps the job
// failing as fast as when every rank had a link to every other. The
// asking is answerReports': its waiting get, which the store fails as
// soon as any rank departs, is the watch.
func (c *Communicator) tellLeavers(ds []bootstrap.Departure) bool {
	others := blame.OthersGone(c.names(), ds)
	if len(others) == 0 {
		return false // only this rank, or a replacement never admitted, left
	}
	saw := blame.Departures(others)
	if why, ok := strings.CutPrefix(others[0].Why, "give up: "); ok && len(others) == 1 {
		// Worded as the rank's own link would have told it.
		saw = fmt.Sprintf("that rank %d gave up: %s", others[0].Rank, why)
	}
	// Departed carries the departures, so that a call this ends, even one
	// not yet started, names the rank that left as its cause (CallError).
	c.leavers <- blame.Departed{Err: fmt.Errorf("%w: %w: the rendezvous saw %s", ErrPeerLost, bootstrap.ErrRankGone, saw), Departures: others}
	return true
}

// departuresWait bounds how long a rank that lost a peer waits for the
// store to see the departure that caused it: the store notices a death as
// soon as the kernel closes the dead rank's connection, within
// milliseconds, but may not have when we ask.
const departuresWait = 300 * time.Millisecond

// neverArrived names the ranks that never published their host, for an
// Init that timed out: ", rank 3 never arrived". It asks the store on a
// connection of its own, the communicator's being cut by the deadline,
// and says nothing if the store does not answer at once.
func neverArrived(cfg Config) string {
	if cfg.Addr == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	store, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return ""
	}
	defer store.Close()
	m, err := store.Scan(ctx, wiring.HostPrefix)
	if err != nil {
		return ""
	}
	// The first 8 missing ranks are named and the rest counted: the
	// ranks that did arrive are those of m, so the count costs nothing
	// even when WORLD_SIZE is huge and almost nobody came.
	var missing []string
	for r := 0; r < cfg.Size && len(missing) < 9; r++ {
		if _, ok := m[wiring.HostPrefix+strconv.Itoa(r)]; !ok {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	arrived := 0
	for k := range m {
		if r, err := strconv.Atoi(strings.TrimPrefix(k, wiring.HostPrefix)); err == nil && r >= 0 && r < cfg.Size {
			arrived++
		}
	}
	n := cfg.Size - arrived
	switch {
	case n <= 0:
		return ""
	case n == 1:
		return ", rank " + missing[0] + " never arrived"
	case n > 8:
		missing = append(missing[:8], fmt.Sprintf("and %d more", n-8))
	}
	return ", ranks " + strings.Join(missing, ", ") + " never arrived"
}
