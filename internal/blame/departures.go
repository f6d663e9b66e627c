package blame

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
)

// Departed is a failure through a lost peer (Err) with what the
// rendezvous saw of the ranks that left the job abnormally (Departures,
// never empty): the culprit of a CallError whose chain holds one is the
// first of them to die, else to give up.
type Departed struct {
	Err        error
	Departures []bootstrap.Departure
}

func (d Departed) Error() string {
	if strings.Contains(d.Err.Error(), d.Departures[0].String()) {
		return d.Err.Error()
	}
	return d.Err.Error() + " (the rendezvous saw " + Departures(d.Departures) + ")"
}

func (d Departed) Unwrap() error { return d.Err }

// Departures names the first rank that left, the likely cause of the
// rest: the others mostly gave up because of it.
func Departures(ds []bootstrap.Departure) string {
	if len(ds) == 1 {
		return ds[0].String()
	}
	return fmt.Sprintf("%v first, then %d more", ds[0], len(ds)-1)
}

// OthersGone is ds, the store's departures, without those of rank
// n.Rank itself and without those of replacements that left before they
// were admitted to an elastic job (job ranks past n.Size), which were
// never members.
func OthersGone(n Names, ds []bootstrap.Departure) []bootstrap.Departure {
	return slices.DeleteFunc(slices.Clone(ds), func(d bootstrap.Departure) bool {
		return d.Rank == n.Rank || d.Rank >= n.Size
	})
}

// InitLoss is err, an Init that lost a peer, worded as when the
// departure watch is first (RankGone): the rank the store saw leave first
// other than this one, in one line, rather than the relay of goodbyes a
// link passed on ("rank 5 gave up: peer lost: rank 3 gave up: ...") with
// the departures after it. The chain stays behind it, for errors.As and
// the log. err is returned as it is if no other rank left.
func InitLoss(n Names, err error) error {
	var d Departed
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &d) {
		return err
	}
	others := OthersGone(n, d.Departures)
	if len(others) == 0 {
		return err
	}
	return lostInInit{short: fmt.Errorf("%w: %w", transport.ErrPeerLost, RankGone(others)), chain: err}
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

// RankGone is the departures ds as the one line Init fails with when a
// rank leaves before every rank has connected.
func RankGone(ds []bootstrap.Departure) error {
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
