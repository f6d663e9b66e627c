package comm

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/elastic"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
)

// ErrExcluded: the ranks that called Shrink agreed on a set of survivors
// without this rank (another survivor had lost its link to it, or it
// called Shrink after they had agreed), or, for a replacement waiting
// in Init to join a running job, every member of the job closed or left
// before a Grow admitted it. It cannot rejoin that communicator; it
// should close what it holds and exit.
var ErrExcluded = sentinel.Excluded

// WithElastic makes the job elastic (see Shrink): a communicator that
// fails ends alone, leaving the connections to the live ranks up, so that
// the survivors can shrink it and go on. It overrides GOCOLL_ELASTIC.
func WithElastic(on bool) Option {
	return func(s *settings) { s.Elastic = on }
}

// Shrink is how the survivors of a failure go on without the ranks they
// lost, as ULFM's MPI_Comm_shrink and ncclCommShrink: every live rank of
// c calls it (typically after a call failed with ErrPeerLost or
// ErrBroken, or after an Abort on any rank), and each gets a new
// communicator of the same survivors, ranked densely in their order in c.
// It needs an elastic job (GOCOLL_ELASTIC=1, grun --elastic, or
// WithElastic(true)), in which a failure ends the communicator it
// happened on but leaves the connections to the live ranks up: the new
// communicator reuses them, and no connection is made.
//
// What is agreed: the set of survivors, the same on every rank that gets
// a communicator. A rank is left out if it died (its process ended: the
// rendezvous store saw its connection close), if it closed the job's
// communicator (it left in good order), if any survivor lost its
// link to it, or if it called Shrink only after the others had agreed
// (it gets ErrExcluded). The survivors wait for every rank of c to call
// Shrink or be found gone, so a rank that lives but never calls Shrink
// keeps them waiting until ctx ends (or GOCOLL_TIMEOUT when ctx has no
// deadline): the error then names it. A rank that dies while the others
// agree is left out if its death is seen before they decide; if it is
// seen after, the new communicator's first call fails with ErrPeerLost
// naming it, and the survivors shrink again.
//
// The decision is made through the rendezvous store, with one
// compare-and-set: under grun the store lives in grun, so any rank may
// die, rank 0 included. Under other launchers it lives in rank 0's
// process; if rank 0 dies, Shrink fails (with an error wrapping
// ErrPeerLost) because no rank can be sure what the others decided.
//
// After Shrink, c is broken for good (ErrBroken), and so is every
// communicator split from it: split the new one again to rebuild them.
// The new communicator owns the job's connections: closing it closes
// them (and c), so close it, not c, when done; closing c as well does no
// harm. Data the failed call wrote into a buffer may be partial on any
// rank: redo the step on the new communicator from state every survivor
// agrees on (broadcast it, as examples/elastic does). A communicator can
// be shrunk once; shrink the one it returned after a later failure.
func (c *Communicator) Shrink(ctx context.Context) (*Communicator, error) {
	if c == nil {
		return nil, errNil("shrink")
	}
	if ctx == nil {
		return nil, errNilContext("shrink")
	}
	if !c.elastic {
		return nil, fmt.Errorf("%s: shrink: the job is not elastic (start it with GOCOLL_ELASTIC=1, grun --elastic, or comm.WithElastic(true)): %w", c.names().Prefix(), ErrInvalid)
	}
	if c.calls == nil || c.ext.ch == nil {
		return nil, fmt.Errorf("%s: shrink: a job without a rendezvous store cannot agree on survivors: %w", c.names().Prefix(), ErrInvalid)
	}
	if c.closing.Load() {
		return nil, fmt.Errorf("%s: shrink: %w", c.names().Prefix(), ErrClosed)
	}
	if c.ext.grown.Load() {
		return nil, fmt.Errorf("%s: shrink: this communicator was grown; shrink the one Grow returned: %w", c.names().Prefix(), ErrInvalid)
	}
	if !c.ext.shrunk.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%s: shrink: this communicator was shrunk already; shrink the one that returned: %w", c.names().Prefix(), ErrInvalid)
	}
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// The ranks move on: this communicator, and what was split from it,
	// end here, so a call still running on them wakes (on other ranks
	// too, through the store: see drop) instead of waiting for a rank
	// that has gone to Shrink.
	cause := fmt.Errorf("%w: it was shrunk", ErrBroken)
	if c.broken.Load() == nil {
		c.setBroken(cause)
	}
	c.endDescendants(cause)
	c.drop(cause)

	members := make([]int, c.Size())
	for i := range members {
		members[i] = c.ext.ch.JobRank(i)
	}
	var lost []int
	if ln, ok := c.ext.mux.Transport().(transport.LossNotifier); ok {
		for _, pe := range blame.Lost(ln.LostErr()) {
			if slices.Contains(members, pe.Peer) {
				lost = append(lost, pe.Peer)
			}
		}
	}
	survivors, err := c.member().Survivors(ctx, members, lost)
	if err != nil {
		return nil, fmt.Errorf("%s: shrink: %w", c.names().Prefix(), err)
	}
	me := c.names().JobRank(c.cfg.Rank)
	if !slices.Contains(survivors, me) {
		return nil, fmt.Errorf("%s: shrink: the survivors (job ranks %s) agreed without this rank: %w", c.names().Prefix(), elastic.RankList(survivors), ErrExcluded)
	}
	id, name := elastic.Shrunk(c.ext.id, c.ext.name, c.ext.gen)
	nc, err := c.child(id, survivors, name)
	if err != nil {
		return nil, fmt.Errorf("%s: shrink: %w", c.names().Prefix(), err)
	}
	nc.ext.gen = c.ext.gen + 1
	nc.ext.shrunkFrom = c
	c.log.Info("shrunk", "survivors", elastic.RankList(survivors), "lost", len(members)-len(survivors),
		"rank", nc.Rank(), "size", nc.Size(), "took", time.Since(start).Round(time.Microsecond))
	return nc, nil
}

// endDescendants ends every communicator split (or shrunk) from c: their
// members move on with c's survivors.
func (c *Communicator) endDescendants(cause error) {
	root := c
	if c.ext.root != nil {
		root = c.ext.root
	}
	root.kids.mu.Lock()
	var ends []*Communicator
	for _, k := range root.kids.list {
		for p := k.ext.parent; p != nil; p = p.ext.parent {
			if p == c {
				ends = append(ends, k)
				break
			}
		}
	}
	root.kids.mu.Unlock()
	for _, k := range ends {
		if k.broken.Load() == nil {
			k.setBroken(fmt.Errorf("%w: the communicator it was split from was shrunk", ErrBroken))
		}
		k.drop(cause)
	}
}

// member is c's side of the elastic agreements in the store.
func (c *Communicator) member() elastic.Member {
	return elastic.Member{Store: c.calls, Names: c.names(), ID: c.ext.id, Source: c.cfg.Source}
}

// sayClosed tells the store this rank closes the job's communicator of an
// elastic job.
func (c *Communicator) sayClosed() {
	if !c.elastic || c.ext.root != nil || c.calls == nil {
		return
	}
	elastic.SayClosed(c.calls, c.cfg.Rank)
}
