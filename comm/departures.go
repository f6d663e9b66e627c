package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/wiring"
)

// withDepartures adds to err what the store saw of ranks that left the job
// abnormally. The store saw every rank's rendezvous connection: it knows
// who died even when no link of ours could tell (a death hidden behind
// data not yet read, a rank that gave up mid-frame, a rank that died
// before it connected).
func (c *Communicator) withDepartures(err error) error {
	if c.store == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), departuresWait+time.Second)
	ds, derr := c.store.Departures(ctx, departuresWait)
	cancel()
	switch {
	case derr != nil && (errors.Is(derr, context.DeadlineExceeded) || errors.Is(derr, context.Canceled)):
		// Our own request to the store was cut short by the deadline,
		// which left that connection unusable: the store is not at fault.
		return err
	case derr != nil:
		return fmt.Errorf("%w (rendezvous unreachable too: %v)", err, derr)
	case len(ds) > 0:
		return departed{err, ds}
	}
	return err
}

// departures names the first rank that left, the likely cause of the
// rest: the others mostly gave up because of it.
func departures(ds []bootstrap.Departure) string {
	if len(ds) == 1 {
		return ds[0].String()
	}
	return fmt.Sprintf("%v first, then %d more", ds[0], len(ds)-1)
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
	others := c.othersGone(ds)
	if len(others) == 0 {
		return false // only this rank, or a replacement never admitted, left
	}
	saw := departures(others)
	if why, ok := strings.CutPrefix(others[0].Why, "give up: "); ok && len(others) == 1 {
		// Worded as the rank's own link would have told it.
		saw = fmt.Sprintf("that rank %d gave up: %s", others[0].Rank, why)
	}
	// departed carries the departures, so that a call this ends, even one
	// not yet started, names the rank that left as its cause (CallError).
	c.leavers <- departed{err: fmt.Errorf("%w: %w: the rendezvous saw %s", ErrPeerLost, bootstrap.ErrRankGone, saw), ds: others}
	return true
}

// othersGone is ds, the store's departures, without this rank's own and
// without those of replacements that left before they were admitted to
// an elastic job (job ranks past the job's size, see Grow), which were
// never members.
func (c *Communicator) othersGone(ds []bootstrap.Departure) []bootstrap.Departure {
	return slices.DeleteFunc(slices.Clone(ds), func(d bootstrap.Departure) bool {
		return d.Rank == c.cfg.Rank || d.Rank >= c.cfg.Size
	})
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
	store, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
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

// initLoss is err, an Init that lost a peer, worded as when the
// departure watch is first (rankGone): the rank the store saw leave first
// other than this one, in one line, rather than the relay of goodbyes a
// link passed on ("rank 5 gave up: peer lost: rank 3 gave up: ...") with
// the departures after it. The chain stays behind it, for errors.As and
// the log. err is returned as it is if no other rank left.
func (c *Communicator) initLoss(err error) error {
	var d departed
	if !errors.Is(err, ErrPeerLost) || !errors.As(err, &d) {
		return err
	}
	others := c.othersGone(d.ds)
	if len(others) == 0 {
		return err
	}
	return lostInInit{short: fmt.Errorf("%w: %w", ErrPeerLost, rankGone(others)), chain: err}
}

// lostInInit is an Init's loss of a peer: short is what it says, chain
// how it was found.
type lostInInit struct{ short, chain error }

func (e lostInInit) Error() string   { return e.short.Error() }
func (e lostInInit) Unwrap() []error { return []error{e.short, e.chain} }

// goneError names the first rank the store saw leave as a call's error
// names its cause ("rank 3 died (...)"), and is bootstrap.ErrRankGone.
type goneError struct{ text string }

func (e goneError) Error() string { return e.text }
func (e goneError) Unwrap() error { return bootstrap.ErrRankGone }

// rankGone is the departures ds as the one line Init fails with when a
// rank leaves before every rank has connected.
func rankGone(ds []bootstrap.Departure) error {
	d := ds[0]
	text := fmt.Sprintf("rank %d %s", d.Rank, strings.Replace(d.Why, "die (", "died (", 1))
	if why, ok := strings.CutPrefix(d.Why, "give up: "); ok {
		text = fmt.Sprintf("rank %d gave up: %s", d.Rank, why)
	}
	if len(ds) > 1 {
		text += fmt.Sprintf(", then %d more", len(ds)-1)
	}
	return goneError{text}
}
