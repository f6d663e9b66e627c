package comm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/elastic"
	"github.com/gocoll/gocoll/internal/wiring"
)

// Pending is how many replacement processes this rank last saw waiting
// to join the job (see Grow). It reads a value a background goroutine
// refreshes from the rendezvous store every 100 ms, so it costs an
// atomic load and may be called every step. It is this rank's view:
// another rank may see a newcomer a step earlier or later, so ranks must
// decide together when to grow, for instance by adding Pending to a
// value they allreduce anyway and growing when the sum is positive.
// Once Grow returns, it no longer counts the joiners that Grow admitted.
// It is 0 outside an elastic job.
func (c *Communicator) Pending() int {
	if c == nil {
		return 0
	}
	return c.rootOrSelf().ext.pending.Count()
}

// Joined reports whether this process joined a running elastic job as a
// replacement: its Init returned a communicator another rank's Grow made
// (see Grow). Such a process has no state yet: it takes it from the
// broadcast its new peers make after their Grow.
func (c *Communicator) Joined() bool {
	return c != nil && c.rootOrSelf().ext.joined
}

// Grow admits the replacement processes waiting to join an elastic job
// (see Pending) and returns a communicator of c's members, in their
// order, followed by the joiners in the order they arrived. Every member
// of c calls it, at the same point of their calls on c (a step boundary
// of the program's choosing; nothing may run on c meanwhile): they agree
// through the rendezvous store, with one compare-and-set, on exactly
// which joiners are admitted, and each joiner's Init returns its
// communicator of the same members. Joiners that arrive after the
// agreement wait for the next Grow. If nobody is waiting, Grow returns c
// itself and no error. The program then brings the joiners up to date,
// typically by broadcasting its state from rank 0 of the new
// communicator.
//
// A replacement is a process started with the job's environment (grun
// --elastic MIN:MAX starts one when a rank dies): its Init finds in the
// store that the job runs, takes a fresh job rank past the job's size
// (the n-th replacement of a job of size ranks is job rank size+n-1),
// and waits until a Grow admits it, bounded by its context or
// GOCOLL_TIMEOUT. A job admits up to size+64 replacements over its life.
// If every member closes or leaves before admitting it, its Init fails
// with an error wrapping ErrExcluded: the job ended without it.
//
// Only the job's communicator, or one that Shrink or Grow returned, can
// grow: a communicator split from another gets ErrInvalid (split the
// grown one again).
//
// Grow needs links to new processes. A replacement links to every member
// over TCP, made on demand, whatever the members use among themselves;
// the members keep the links they have (shared memory, RDMA queue pairs,
// TCP). So every rank of an elastic job listens on TCP for replacements
// from Init on: over tcp and shm+tcp, through the TCP links it has; over
// shm, rdma and shm+rdma, through a TCP side that carries nothing until
// a replacement joins (each member then routes the joiner through it and
// the other members as before, as shm+tcp routes per host). A
// replacement cuts messages at the size the job agreed on at Init (the
// smallest slot of any rank's transport), not at its own TCP slot. Only
// on a job whose TCP links are eager (GOCOLL_TCP_CONNECT=eager, over tcp
// or shm+tcp: its ranks stop listening once linked) does Grow fail, with
// an error wrapping ErrUnsupported naming the transport, and a
// replacement's Init the same way instead of waiting.
//
// Once Grow returns a new communicator, c is broken for good (ErrBroken),
// and so is everything split from it; the new one owns the job's
// connections (closing it closes c too), and it can be grown, shrunk and
// split like any other. Grow returns once the members agree, before the
// joiners' links are made: a joiner that died after the agreement makes
// the first call on the new communicator fail with ErrPeerLost naming
// it, and the ranks shrink it as after any death. A broken c must be
// shrunk before it can grow.
func (c *Communicator) Grow(ctx context.Context) (*Communicator, error) {
	if c == nil {
		return nil, errNil("grow")
	}
	if ctx == nil {
		return nil, errNilContext("grow")
	}
	if !c.elastic {
		return nil, fmt.Errorf("%s: grow: the job is not elastic (start it with GOCOLL_ELASTIC=1, grun --elastic, or comm.WithElastic(true)): %w", c.names().Prefix(), ErrInvalid)
	}
	if c.calls == nil || c.ext.ch == nil {
		return nil, fmt.Errorf("%s: grow: a job without a rendezvous store cannot admit anyone: %w", c.names().Prefix(), ErrInvalid)
	}
	if c.ext.root != nil && c.ext.shrunkFrom == nil {
		return nil, fmt.Errorf("%s: grow: a communicator split from another cannot grow: grow the job's (or the one Shrink or Grow returned), then split it again: %w", c.names().Prefix(), ErrInvalid)
	}
	if err := c.unusable(); err != nil {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), err)
	}
	if c.ext.shrunk.Load() || c.ext.grown.Load() {
		return nil, fmt.Errorf("%s: grow: this communicator was shrunk or grown already; grow the one that returned: %w", c.names().Prefix(), ErrInvalid)
	}
	if b := c.broken.Load(); b != nil {
		return nil, fmt.Errorf("%s: grow: the communicator is broken (shrink it first): %w: %w", c.names().Prefix(), ErrBroken, *b)
	}
	root := c.rootOrSelf()
	if root.ext.spare == 0 {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), elastic.CannotGrow(root.tname))
	}
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	seq := c.ext.grows.Add(1)
	members := make([]int, c.Size())
	for i := range members {
		members[i] = c.ext.ch.JobRank(i)
	}
	m := c.member()
	joiners, left, err := m.Joiners(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), err)
	}
	if len(joiners) == 0 {
		return c, nil
	}
	all := append(slices.Clone(members), joiners...)
	id, name := elastic.Grown(c.ext.id, c.ext.name, seq)
	if err := m.Admit(ctx, joiners, elastic.Admission{ID: id, Members: all, Name: name}); err != nil {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), err)
	}
	// Pending must not count the joiners admitted.
	root.ext.pending.AfterGrow(left)
	// c, and what was split from it, end here: the ranks move on.
	c.ext.grown.Store(true)
	cause := fmt.Errorf("%w: it was grown", ErrBroken)
	c.setBroken(cause)
	c.endDescendants(cause)
	nc, err := c.child(id, all, name)
	if err != nil {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), err)
	}
	nc.ext.gen = c.ext.gen
	nc.ext.shrunkFrom = c
	c.log.Info("grown", "joiners", elastic.RankList(joiners), "rank", nc.Rank(), "size", nc.Size(),
		"took", time.Since(start).Round(time.Microsecond))
	return nc, nil
}

// watchPending keeps the job communicator's count of waiting
// replacements fresh until c ends.
func (c *Communicator) watchPending() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
		case <-c.aborted:
		}
		cancel()
	}()
	c.ext.pending.Watch(ctx, c.cfg)
}

// sayRunning tells the store, once the job's communicator of an elastic
// job is built, that the job runs and whether this rank's transport can
// link to replacements (see Grow).
func (c *Communicator) sayRunning(ctx context.Context, maxMessage int) error {
	eager := c.ext.spare == 0 && strings.HasSuffix(c.tname, "tcp")
	if err := elastic.SayRunning(ctx, c.calls, c.cfg.Rank, c.tname, maxMessage, c.ext.spare, eager, c.plan); err != nil {
		return err
	}
	if c.ext.spare > 0 {
		go c.watchPending()
	}
	return nil
}

// join makes this process, started with the environment of cfg's job
// (cfg.Rank is the rank it replaces) after the job started, a member of
// it: see Grow. It returns the communicator the running ranks' Grow
// made, once they admitted it.
func join(ctx context.Context, cfg Config, s settings, store *bootstrap.Client) (_ *Communicator, err error) {
	start := time.Now()
	prefix := fmt.Sprintf("comm: replacement for rank %d of %d", cfg.Rank, cfg.Size)
	fail := func(what string, err error) (*Communicator, error) {
		return nil, fmt.Errorf("%s: join the running elastic job: %s%w", prefix, what, err)
	}
	defer func() {
		if err != nil && store != nil {
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			store.Leave(lctx, "gave up joining: "+err.Error())
			cancel()
			store.Close()
		}
	}()
	spare, err := elastic.Spare(ctx, store)
	if err != nil {
		return fail("", err)
	}
	// The job's plan, not this process's: it cuts long buffers at the
	// job's agreed message size (shared memory's slot, if smaller than
	// TCP's, though this process talks TCP alone) and chooses the
	// algorithms as the members do, though its own links are TCP's.
	algos, err := collectives.ParseAlgos(s.algo)
	if err != nil {
		return fail("", err)
	}
	jobPlan, err := elastic.JobPlan(ctx, store, settingsPlan(s, algos, cfg.HalfAccum), s.logger.With("rank", cfg.Rank))
	if err != nil {
		return fail("", err)
	}
	maxMessage := jobPlan.MaxMessage
	k, err := elastic.TakeRank(ctx, store, cfg.Size, spare)
	if err != nil {
		return fail("", err)
	}
	prefix = fmt.Sprintf("comm: job rank %d (replacing rank %d of %d)", k, cfg.Rank, cfg.Size)
	if err := store.Join(ctx, k, cfg.Size, cfg.Job); err != nil {
		return fail("", err)
	}
	o := s.TCP
	o.Spare, o.Eager, o.Warm = spare, false, nil
	t, links, err := wiring.ConnectJoiner(ctx, cfg, k, o)
	if err != nil {
		return fail("", err)
	}
	abandon := func() {
		t.Close()
		links.Close()
	}
	if err := elastic.SayWaiting(ctx, store, k, start); err != nil {
		abandon()
		return fail("", err)
	}
	s.logger.Info("waiting to join the running job", "job_rank", k, "replaces", cfg.Rank)
	admit, err := elastic.Admitted(ctx, store, k, cfg.Size)
	if err != nil {
		abandon()
		return fail("", err)
	}
	rcfg := cfg
	rcfg.Rank = k
	c := &Communicator{cfg: rcfg, log: s.logger.With("rank", k), closed: make(chan struct{}),
		timeout: s.timeout, aborted: make(chan struct{}), stallAfter: s.stall,
		t: t, store: store, linkStore: links, calls: store, tname: "tcp", elastic: true, plan: jobPlan}
	c.life, c.kill = context.WithCancelCause(context.Background())
	c.ext.spare = spare
	if maxMessage > t.MaxMessage() {
		abandon()
		return fail("", fmt.Errorf("the job cuts messages at %d bytes, above this process's TCP slot of %d (every rank must use the same transport options): %w",
			maxMessage, t.MaxMessage(), ErrInvalid))
	}
	c.ext.mux = collectives.NewMux(t, maxMessage)
	ch, err := c.ext.mux.Channel(0, []int{k})
	if err != nil {
		abandon()
		return fail("", err)
	}
	c.ext.ch = ch
	gopts, err := c.groupOptions()
	if err != nil {
		abandon()
		return fail("", err)
	}
	c.g = collectives.NewGroup(ch, gopts)
	go c.watchPending()
	nc, err := c.child(admit.ID, admit.Members, admit.Name)
	if err != nil {
		c.shutdown()
		store = nil
		return fail("", err)
	}
	nc.ext.shrunkFrom = c
	c.ext.joined = true
	c.log.Info("joined the running job", "job_rank", k, "rank", nc.Rank(), "size", nc.Size(),
		"took", time.Since(start).Round(time.Microsecond), "plan", fmt.Sprintf("%016x", c.plan.Fingerprint()))
	return nc, nil
}
