package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/elastic"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// Undefined is the color of a rank that wants no part in the
// sub-communicators of a Split (MPI_UNDEFINED): it gets nil.
const Undefined = -1

// ext is the state behind sub-communicators, point-to-point messages and
// the issue order.
type ext struct {
	mux *collectives.Mux     // shared by the job and every communicator split from it
	ch  *collectives.Channel // this communicator's view of it
	id  uint64

	splits uint64 // Splits so far; counted inside collectives, so in step on every rank
	// root is the job's communicator, nil on itself; parent the one this
	// was split or shrunk from.
	root, parent *Communicator
	// name is how errors name the communicator: empty for the job's,
	// else how it was split from it (see CallError.Comm).
	name string
	// shrunk is set once Shrink was called on this communicator;
	// shrunkFrom is the one this was shrunk from (whose Close this
	// one's closes: see Shrink), and gen how many shrinks led here.
	shrunk     atomic.Bool
	shrunkFrom *Communicator
	gen        int
	// grown is set once Grow made a new communicator of this one, and
	// grows counts its Grow calls (the store keys of each agreement);
	// pending (the job's communicator only) is how many replacements
	// wait to join, kept fresh by watchPending and set by Grow; spare
	// (the job's communicator only) is how many the transport can link
	// to, 0 when it cannot grow (grow.go); joined (the job's
	// communicator only) says this process joined a running job.
	joined  bool
	grown   atomic.Bool
	grows   atomic.Int64
	pending elastic.Pending
	spare   int
	// shapes are the layouts AllReduceMany checked (manyshape.go).
	shapes manyShapes
	// took is Stats.Time, counted while timing is set (kindtime.go).
	took   kindTimes
	timing atomic.Bool
	// ended is the number of the latest call that began and returned,
	// failed the latest that failed (0: none): a call the group has
	// not numbered yet (refused, given up, or not past its preamble)
	// must not make Records or a fault name the call before it.
	ended, failedSeq atomic.Uint64
}

// share puts the job's transport under a Mux, so that sub-communicators
// and point-to-point messages can share its connections, and returns the
// job communicator's channel (id 0, every rank). maxMessage is the job's
// agreed message cap (see agreeTransports).
func (c *Communicator) share(maxMessage int) transport.Transport {
	ranks := make([]int, c.cfg.Size)
	for i := range ranks {
		ranks[i] = i
	}
	c.ext.mux = collectives.NewMux(c.t, maxMessage)
	ch, err := c.ext.mux.Channel(0, ranks)
	if err != nil {
		panic("unreachable: every rank is a member of the job: " + err.Error())
	}
	c.ext.ch = ch
	return ch
}

// Split divides the communicator's ranks into sub-communicators, one per
// color, as MPI_Comm_split does: ranks passing the same color form one,
// ranked by key (ties by their rank here). A rank passing Undefined gets
// nil and no error. It is a collective: every rank must call it, in the
// same place of the collective order.
//
// The sub-communicator shares this one's connections (its messages carry
// its id, see collectives.Mux), so splitting costs one allgather and no
// new connections. Its collectives may run concurrently with this one's
// and with other sub-communicators', from different goroutines; each
// communicator still runs its own one at a time, in issue order. It has
// its own timeout and watchdog. Close it when done; closing the parent
// closes the shared connections under it. Aborting it, or a failure that
// breaks it, ends it alone, as ncclCommAbort on a split communicator: the
// connections stay up for the parent and the other communicators, and the
// other members' calls on it fail within moments with ErrPeerLost naming
// the rank that left and why (it tells them through the rendezvous
// store). A failure of the job's communicator, or a lost peer, ends every
// communicator of the job; in an elastic job (see Shrink), a lost peer
// ends only the communicators it is a member of, and a failure of the
// job's communicator only that one.
func (c *Communicator) Split(ctx context.Context, color, key int) (*Communicator, error) {
	if c == nil {
		return nil, errNil("split")
	}
	if color < 0 && color != Undefined {
		return nil, c.refuse(ctx, "split", fmt.Errorf("comm: split: color %d is negative (use a color >= 0, or Undefined): %w", color, ErrInvalid))
	}
	n := c.Size()
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*n)
	var seq uint64
	err := c.run(ctx, "split", func(ctx context.Context) error {
		c.ext.splits++
		seq = c.ext.splits
		return c.g.AllGather(ctx, bytesOf(mine), bytesOf(all), reduce.Int64)
	})
	if err != nil {
		return nil, err
	}
	if color == Undefined {
		return nil, nil
	}
	var members []int
	for q := 0; q < n; q++ {
		if all[2*q] == int64(color) {
			members = append(members, q)
		}
	}
	sort.SliceStable(members, func(i, j int) bool { return all[2*members[i]+1] < all[2*members[j]+1] })
	jobRanks := make([]int, len(members))
	for i, q := range members {
		jobRanks[i] = c.ext.ch.JobRank(q)
	}
	// The id must differ from that of every communicator sharing a pair
	// of ranks with this one, and every member must compute it alone: a
	// hash of the parent, which of its splits this is, and the color.
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], c.ext.id)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(int64(color)))
	h.Write(b[:])
	id := h.Sum64() | 1 // never 0, the job's
	name := fmt.Sprintf("split #%d color %d", seq, color)
	if c.ext.name != "" {
		name = c.ext.name + " > " + name
	}
	sub, err := c.child(id, jobRanks, name)
	if err != nil {
		return nil, fmt.Errorf("comm: split: %w", err)
	}
	return sub, nil
}

// child makes the communicator id of the job ranks jobRanks (its members,
// in their new order) over c's shared connections, named name in full (a
// split's name follows its parent's; a shrink's replaces it). c's own
// fields are only read: its watchdog may be reading them too.
func (c *Communicator) child(id uint64, jobRanks []int, name string) (*Communicator, error) {
	ch, err := c.ext.mux.Channel(id, jobRanks)
	if err != nil {
		return nil, err
	}
	sub := &Communicator{
		cfg:     Config{Rank: ch.Rank(), Size: ch.Size(), LocalRank: -1, Source: c.cfg.Source},
		t:       ch,
		log:     c.log.With("comm", fmt.Sprintf("%x", id), "comm_rank", ch.Rank()),
		closed:  make(chan struct{}),
		timeout: c.timeout,
		aborted: make(chan struct{}),
		calls:   c.calls,
		elastic: c.elastic,

		stallAfter: c.stallAfter,
		trace:      c.trace,
		plan:       c.plan,
	}
	sub.ext.mux, sub.ext.ch, sub.ext.id = c.ext.mux, ch, id
	sub.ext.name = name
	sub.ext.parent = c
	sub.life, sub.kill = context.WithCancelCause(context.Background())
	opts := c.g.Options()
	opts.Hosts = nil
	if root := c.rootOrSelf(); len(root.hosts) > 0 && slices.Max(jobRanks) < len(root.hosts) {
		// Each member's host, in the new numbering, so that the
		// host-aware algorithms serve sub-communicators too.
		opts.Hosts = make([]int, len(jobRanks))
		for i, j := range jobRanks {
			opts.Hosts[i] = root.hosts[j]
		}
	}
	sub.g = collectives.NewGroup(ch, opts)
	sub.ext.root = c
	if c.ext.root != nil {
		sub.ext.root = c.ext.root
	}
	sub.ext.root.kids.add(sub)
	go sub.watch()
	return sub, nil
}

// rootOrSelf is the job's communicator.
func (c *Communicator) rootOrSelf() *Communicator {
	if c.ext.root != nil {
		return c.ext.root
	}
	return c
}

// SubCommunicator makes a communicator of the ranks listed, ranked in the
// order listed, by a Split: every rank must call it with the same list, and
// ranks not listed get nil.
func (c *Communicator) SubCommunicator(ctx context.Context, ranks []int) (*Communicator, error) {
	if c == nil {
		return nil, errNil("subcommunicator")
	}
	seen := make(map[int]bool, len(ranks))
	color, key := Undefined, 0
	for i, r := range ranks {
		if r < 0 || r >= c.Size() {
			return nil, c.refuse(ctx, "subcommunicator", fmt.Errorf("comm: subcommunicator: rank %d out of range [0, %d): %w", r, c.Size(), ErrInvalid))
		}
		if seen[r] {
			return nil, c.refuse(ctx, "subcommunicator", fmt.Errorf("comm: subcommunicator: rank %d listed twice: %w", r, ErrInvalid))
		}
		seen[r] = true
		if r == c.Rank() {
			color, key = 0, i
		}
	}
	if len(ranks) == 0 {
		return nil, c.refuse(ctx, "subcommunicator", fmt.Errorf("comm: subcommunicator: empty rank list: %w", ErrInvalid))
	}
	return c.Split(ctx, color, key)
}
