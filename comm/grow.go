package comm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/transport/tcp"
)

// How a replacement joins a running elastic job, through the store:
//
//   - every rank of an elastic job puts bootstrap.ElasticRunningKey once
//     its communicator is built, and its transport under
//     elastic/transport/<rank> ("<name> <max message> <spare>" if it
//     listens on TCP for replacements, such as "shm 262144 68", else the
//     name of a transport that cannot grow);
//   - a process whose Init finds the job running takes the first free
//     job rank past the job's size (a create on elastic/joinrank/<k>),
//     joins the store under it, listens, publishes its TCP address (it
//     links to every member over TCP, whatever the members use among
//     themselves), takes the job's plan (elastic/plan, which every
//     member puts with its transport: the agreed message size and what
//     decides the algorithms), and puts
//     elastic/pending/<k> = "wait <start, unix ns>";
//   - the running ranks' Grow agrees, with one create, on the joiners
//     pending, and overwrites each one's entry with
//     "admit <id> <members> <name>", which that joiner's Init reads.

const (
	pendingPrefix   = "elastic/pending/"
	transportPrefix = "elastic/transport/"
	joinRankPrefix  = "elastic/joinrank/"
)

// pendingEvery is how often a rank of an elastic job looks at the store
// for replacements waiting to join (Pending's value); joinPoll how often
// a waiting replacement looks for its admission.
const (
	pendingEvery = 100 * time.Millisecond
	joinPoll     = 10 * time.Millisecond
)

// canGrow says which transports link to processes started later.
const canGrow = "replacements link to the members over TCP made on demand, which GOCOLL_TCP_CONNECT=eager turns off"

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
	return int(c.rootOrSelf().ext.pending.Load())
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
		return nil, fmt.Errorf("%s: grow: the %s transport cannot link to new processes (%s): %w",
			c.names().Prefix(), root.tname, canGrow, ErrUnsupported)
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
	joiners, waiting, err := c.agreeJoiners(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), err)
	}
	if len(joiners) == 0 {
		return c, nil
	}
	all := append(slices.Clone(members), joiners...)
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], c.ext.id)
	binary.LittleEndian.PutUint64(b[8:], uint64(seq))
	binary.LittleEndian.PutUint64(b[16:], 0x574f5247) // "GROW"
	h.Write(b[:])
	id := h.Sum64() | 1
	name := "grow #" + strconv.Itoa(int(seq))
	if c.ext.name != "" {
		name = c.ext.name + " > " + name
	}
	// Every member says it: the joiner goes on as soon as one has, and
	// any member may die meanwhile.
	admit := "admit " + strconv.FormatUint(id, 16) + " " + rankList(all) + " " + name
	for _, j := range joiners {
		if err := c.calls.Put(ctx, pendingPrefix+strconv.Itoa(j), []byte(admit)); err != nil {
			return nil, fmt.Errorf("%s: grow: %w", c.names().Prefix(), c.storeGone(err))
		}
	}
	// Pending must not count the joiners admitted: the watcher may have
	// read them waiting a moment ago and would say so until its next
	// read, and ranks that grow again on a positive sum would admit
	// nobody while the next replacement has not arrived yet.
	left := 0
	for _, j := range waiting {
		if !slices.Contains(joiners, j) {
			left++
		}
	}
	root.pendingAfterGrow(left)
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
	c.log.Info("grown", "joiners", rankList(joiners), "rank", nc.Rank(), "size", nc.Size(),
		"took", time.Since(start).Round(time.Microsecond))
	return nc, nil
}

// agreeJoiners returns the job ranks the members of c agree to admit in
// their seq-th Grow (the first proposal stored wins), and those this
// rank found waiting. A rank proposes the replacements it finds waiting
// that have not left the store.
func (c *Communicator) agreeJoiners(ctx context.Context, seq int64) (joiners, waiting []int, err error) {
	key := "elastic/" + strconv.FormatUint(c.ext.id, 16) + "/grow/" + strconv.FormatInt(seq, 10)
	store := c.calls
	m, err := store.Scan(ctx, pendingPrefix)
	if err != nil {
		return nil, nil, c.storeGone(err)
	}
	ds, err := store.Departures(ctx, 0)
	if err != nil {
		return nil, nil, c.storeGone(err)
	}
	gone := map[int]bool{}
	for _, d := range ds {
		gone[d.Rank] = true
	}
	for k, v := range m {
		j, err := strconv.Atoi(strings.TrimPrefix(k, pendingPrefix))
		if err != nil || !strings.HasPrefix(string(v), "wait ") {
			continue
		}
		if gone[j] {
			// Pending stops counting it.
			store.Put(ctx, k, []byte("gone"))
			continue
		}
		waiting = append(waiting, j)
	}
	slices.Sort(waiting)
	v, err := store.Create(ctx, key, []byte(rankList(waiting)))
	if err != nil {
		return nil, nil, c.storeGone(err)
	}
	joiners, err = parseRanks(string(v))
	return joiners, waiting, err
}

// pendingSeen sets Pending's count, on the job's communicator c, to n
// replacements the watcher found waiting, unless a Grow set it since
// the watcher took gen (pendingGeneration) before reading the store: n
// may then count the joiners that Grow admitted.
func (c *Communicator) pendingSeen(gen uint64, n int) {
	c.ext.pendingMu.Lock()
	defer c.ext.pendingMu.Unlock()
	if gen == c.ext.pendingGen {
		c.ext.pending.Store(int64(n))
	}
}

// pendingAfterGrow sets Pending's count, on the job's communicator c, to
// the n replacements still waiting after a Grow, and drops what the
// watcher is reading meanwhile.
func (c *Communicator) pendingAfterGrow(n int) {
	c.ext.pendingMu.Lock()
	defer c.ext.pendingMu.Unlock()
	c.ext.pendingGen++
	c.ext.pending.Store(int64(n))
}

// pendingGeneration counts the Grows that set Pending's count.
func (c *Communicator) pendingGeneration() uint64 {
	c.ext.pendingMu.Lock()
	defer c.ext.pendingMu.Unlock()
	return c.ext.pendingGen
}

// watchPending keeps the job communicator's count of waiting
// replacements fresh, on a store connection of its own, until c ends.
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
	cl, err := bootstrap.DialJob(ctx, c.cfg)
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(pendingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		gen := c.pendingGeneration()
		m, err := cl.Scan(ctx, pendingPrefix)
		if err != nil {
			return
		}
		n := 0
		for _, v := range m {
			if strings.HasPrefix(string(v), "wait ") {
				n++
			}
		}
		c.pendingSeen(gen, n)
	}
}

// sayRunning tells the store, once the job's communicator of an elastic
// job is built, that the job runs and whether this rank's transport can
// link to replacements (see Grow).
func (c *Communicator) sayRunning(ctx context.Context, maxMessage int) error {
	what := c.tname
	if c.ext.spare > 0 {
		what = fmt.Sprintf("%s %d %d", c.tname, maxMessage, c.ext.spare)
	} else if strings.HasSuffix(c.tname, "tcp") {
		what = c.tname + " with GOCOLL_TCP_CONNECT=eager"
	}
	if err := c.calls.Put(ctx, transportPrefix+strconv.Itoa(c.cfg.Rank), []byte(what)); err != nil {
		return err
	}
	// Every rank puts the same plan, before the job is said to run: a
	// replacement finds it whichever rank said so first.
	if err := c.calls.Put(ctx, jobPlanKey, []byte(c.plan.Encode())); err != nil {
		return err
	}
	if err := c.calls.Put(ctx, bootstrap.ElasticRunningKey, []byte("1")); err != nil {
		return err
	}
	if c.ext.spare > 0 {
		go c.watchPending()
	}
	return nil
}

// jobOver says whether every member of the running job (its first
// size ranks and the replacements admitted since) closed its
// communicator or left: a replacement still waiting then never will be
// admitted.
func jobOver(ctx context.Context, store *bootstrap.Client, size int) (bool, error) {
	closed, err := store.Scan(ctx, "elastic/closed/")
	if err != nil {
		return false, err
	}
	ds, err := store.Departures(ctx, 0)
	if err != nil {
		return false, err
	}
	pending, err := store.Scan(ctx, pendingPrefix)
	if err != nil {
		return false, err
	}
	gone := map[int]bool{}
	for _, d := range ds {
		gone[d.Rank] = true
	}
	for k := range closed {
		if j, err := strconv.Atoi(strings.TrimPrefix(k, "elastic/closed/")); err == nil {
			gone[j] = true
		}
	}
	members := make([]int, 0, size)
	for j := range size {
		members = append(members, j)
	}
	for k, v := range pending {
		if j, err := strconv.Atoi(strings.TrimPrefix(k, pendingPrefix)); err == nil && strings.HasPrefix(string(v), "admit ") {
			members = append(members, j)
		}
	}
	for _, j := range members {
		if !gone[j] {
			return false, nil
		}
	}
	return true, nil
}

// runningJob says whether cfg's job is an elastic job running already,
// which a process starting now joins as a replacement. It returns the
// store connection it asked on, to be used for the joining, or nil.
func runningJob(ctx context.Context, cfg Config) (*bootstrap.Client, error) {
	store, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, err := store.Scan(ctx, bootstrap.ElasticRunningKey)
	if err != nil {
		store.Close()
		return nil, err
	}
	if _, ok := m[bootstrap.ElasticRunningKey]; !ok {
		store.Close()
		return nil, nil
	}
	return store, nil
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
	ts, err := store.Scan(ctx, transportPrefix)
	if err != nil {
		return fail("", err)
	}
	spare := 0
	for k, v := range ts {
		var name string
		var mm, sp int
		if n, _ := fmt.Sscanf(string(v), "%s %d %d", &name, &mm, &sp); n != 3 || sp <= 0 || mm <= 0 {
			return fail("", fmt.Errorf("%s runs over %s, which cannot link to new processes (%s): %w",
				strings.Replace(k, transportPrefix, "rank ", 1), v, canGrow, ErrUnsupported))
		}
		spare = sp
	}
	if spare == 0 {
		return fail("", fmt.Errorf("no rank said which transport it runs: %w", ErrUnsupported))
	}
	// The job's plan, not this process's: it cuts long buffers at the
	// job's agreed message size (shared memory's slot, if smaller than
	// TCP's, though this process talks TCP alone) and chooses the
	// algorithms as the members do, though its own links are TCP's.
	algos, err := collectives.ParseAlgos(s.algo)
	if err != nil {
		return fail("", err)
	}
	jobPlan, err := takeJobPlan(ctx, store, settingsPlan(s, algos, cfg.HalfAccum), s.logger.With("rank", cfg.Rank))
	if err != nil {
		return fail("", err)
	}
	maxMessage := jobPlan.MaxMessage
	// A fresh job rank: the first past the job's size not taken yet.
	taken, err := store.Scan(ctx, joinRankPrefix)
	if err != nil {
		return fail("", err)
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	mine := hex.EncodeToString(nonce[:])
	k := -1
	for j := cfg.Size + len(taken); j < cfg.Size+spare; j++ {
		v, err := store.Create(ctx, joinRankPrefix+strconv.Itoa(j), []byte(mine))
		if err != nil {
			return fail("", err)
		}
		if string(v) == mine {
			k = j
			break
		}
	}
	if k < 0 {
		return fail("", fmt.Errorf("the job admitted its %d replacements already: %w", spare, ErrUnsupported))
	}
	prefix = fmt.Sprintf("comm: job rank %d (replacing rank %d of %d)", k, cfg.Rank, cfg.Size)
	if err := store.Join(ctx, k, cfg.Size, cfg.Job); err != nil {
		return fail("", err)
	}
	links, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return fail("", err)
	}
	o := s.TCP
	o.Spare, o.Eager, o.Warm = spare, false, nil
	t, err := tcp.Connect(ctx, links, k, cfg.Size, links.LinkToken(), o)
	if err != nil {
		links.Close()
		return fail("", err)
	}
	abandon := func() {
		t.Close()
		links.Close()
	}
	key := pendingPrefix + strconv.Itoa(k)
	if err := store.Put(ctx, key, []byte("wait "+strconv.FormatInt(start.UnixNano(), 10))); err != nil {
		abandon()
		return fail("", err)
	}
	s.logger.Info("waiting to join the running job", "job_rank", k, "replaces", cfg.Rank)
	ended := func() (*Communicator, error) {
		abandon()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fail("", fmt.Errorf("%w: no Grow admitted it: %w", ErrTimeout, context.Cause(ctx)))
		}
		return fail("", fmt.Errorf("no Grow admitted it before its context ended: %w", context.Cause(ctx)))
	}
	var admit string
	for polls := 1; ; polls++ {
		m, err := store.Scan(ctx, key)
		if err == nil && polls%int(pendingEvery/joinPoll) == 0 {
			var over bool
			if over, err = jobOver(ctx, store, cfg.Size); err == nil && over {
				abandon()
				return fail("", fmt.Errorf("%w: the job ended (every member closed or left) before a Grow admitted it", ErrExcluded))
			}
		}
		if err != nil && ctx.Err() != nil {
			return ended()
		}
		if err != nil {
			abandon()
			return fail("waiting to be admitted: ", err)
		}
		if v := string(m[key]); strings.HasPrefix(v, "admit ") {
			admit = v
			break
		}
		select {
		case <-ctx.Done():
			return ended()
		case <-time.After(joinPoll):
		}
	}
	f := strings.SplitN(admit, " ", 4)
	id, perr := strconv.ParseUint(f[1], 16, 64)
	all, rerr := parseRanks(f[2])
	if len(f) < 4 || perr != nil || rerr != nil {
		abandon()
		return fail("", fmt.Errorf("bad admission %q in the store: %w", admit, ErrInvalid))
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
	nc, err := c.child(id, all, f[3])
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
