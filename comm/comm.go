package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/rdma"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// Config is an explicit job description, for programs that do not rely on
// a launcher's environment. See bootstrap.Config for the fields.
type Config = bootstrap.Config

// Errors a program can test for with errors.Is.
var (
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("communicator closed")
	// ErrBroken: an earlier collective failed part-way (peer lost, context
	// ended, mismatch), so the ranks are no longer in step; the error also
	// wraps the original cause. Close it and start again.
	ErrBroken = errors.New("communicator broken by an earlier failure")
	// ErrInvalid: a bad argument (root out of range, buffer sizes that do
	// not fit, overlapping buffers). Nothing was sent; the communicator is
	// still usable.
	ErrInvalid = collectives.ErrInvalid
	// ErrUnsupported: an element type and operation that do not go
	// together, such as Avg on integers.
	ErrUnsupported = errors.New("unsupported")
	// ErrMismatch: ranks called different collectives, or the same one with
	// different arguments. The message says what each side called.
	ErrMismatch = collectives.ErrMismatch
	// ErrPeerLost: a peer died or its connection failed.
	ErrPeerLost = transport.ErrPeerLost
	// ErrEnv: the launch environment is missing or contradictory.
	ErrEnv = bootstrap.ErrEnv
	// ErrAborted: Abort was called on this rank; the error also wraps the
	// reason given to Abort.
	ErrAborted = errors.New("communicator aborted")
	// ErrTimeout: a collective ran past its deadline (the context's, or
	// GOCOLL_TIMEOUT when the context has none). It is returned together
	// with context.DeadlineExceeded, so either test works.
	ErrTimeout = errors.New("timed out")
)

// Communicator is this process's membership in a job: its rank, its
// connections to every other rank, and the collectives over them. Its
// methods and the collective functions are safe to call from several
// goroutines, but collectives on one communicator run one at a time, and
// every rank must issue them in the same order, as with MPI and NCCL.
type Communicator struct {
	cfg    Config
	t      transport.Transport
	g      *collectives.Group
	store  *bootstrap.Client
	server *bootstrap.Server
	log    *slog.Logger

	// turns admits one collective at a time, in issue order (async.go).
	turns turns
	// broken is why an earlier collective left the ranks out of step; only
	// the collective whose turn it is writes it.
	broken  atomic.Pointer[error]
	closed  chan struct{}
	timeout time.Duration // bound of a collective whose ctx has no deadline
	// stopping is set, before closed or aborted closes, by Close or Abort:
	// every collective checks it, twice, and an atomic load costs less
	// than a look at two channels.
	stopping atomic.Bool
	closing  atomic.Bool // Close was called

	abortOnce sync.Once
	aborted   chan struct{} // closed by Abort, after abortErr is set
	abortErr  error

	// The watchdog's view of the running collective: which one runs (the
	// turn, in turns; and bounded), and what the watchdog found wrong
	// with it: a peer lost elsewhere in the job, or the timeout. A fault
	// closes the transport, which wakes the collective; run then reports
	// the fault rather than the ErrClosed the transport saw.
	// bounded is 1 + the ticket of the last collective whose ctx had a
	// deadline: the watchdog leaves that one to its deadline. Contexts
	// without one, the usual case, store nothing.
	bounded atomic.Uint64
	faultMu sync.Mutex
	faulted atomic.Bool // fault or lostErr is set
	fault   error
	lostErr error // a peer lost while no collective ran

	hosts []int  // each rank's host, for the host-aware algorithms
	tname string // the transport chosen
	ext   ext    // sub-communicators, point-to-point, issue order (split.go, async.go)
}

// Option adjusts how a communicator is built.
type Option func(*settings)

type settings struct {
	transport string
	algo      string
	timeout   time.Duration
	logger    *slog.Logger
	tcp       tcp.Options
	shm       shm.Options
	rdma      rdma.Options
	fakeHosts int
}

// WithTransport picks the transport: "auto" (default), "tcp", "shm", "rdma".
// It overrides GOCOLL_TRANSPORT.
func WithTransport(name string) Option { return func(s *settings) { s.transport = name } }

// WithAlgorithm forces algorithms, in GOCOLL_ALGO syntax ("ring", or
// "allreduce=rd,broadcast=chain"). It overrides GOCOLL_ALGO.
func WithAlgorithm(spec string) Option { return func(s *settings) { s.algo = spec } }

// WithTimeout bounds how long Init, and then each collective, may take
// when its ctx has no deadline of its own: a rank that never joins or a
// peer that hangs becomes an error wrapping ErrTimeout instead of a hang.
// It overrides GOCOLL_TIMEOUT.
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithLogger sends the library's log lines to l instead of the
// GOCOLL_DEBUG-configured stderr logger.
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// WithTCPOptions tunes the TCP transport (slot count and size).
func WithTCPOptions(o tcp.Options) Option { return func(s *settings) { s.tcp = o } }

// DefaultTimeout is how long Init, or a collective, may take when neither
// its context, WithTimeout nor GOCOLL_TIMEOUT sets a bound. It is long,
// because a rank may reach a collective long after its peers (a slow
// checkpoint, uneven work); it is finite, because a job that hangs for
// good costs more than one that fails.
const DefaultTimeout = 10 * time.Minute

// Init joins the job described by the launcher's environment (grun,
// torchrun-style, Open MPI or Slurm; see bootstrap.FromEnv) and connects to
// every other rank. It returns once every rank has connected. A rank a
// launcher started leaves, from Init on, if that launcher exits
// (ErrLauncherGone).
func Init(ctx context.Context, opts ...Option) (*Communicator, error) {
	cfg, err := bootstrap.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("comm: init: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var made atomic.Pointer[Communicator]
	watchLauncher(cfg, cancel, &made)
	c, err := New(ctx, cfg, opts...)
	if err != nil && errors.Is(context.Cause(ctx), ErrLauncherGone) {
		err = fmt.Errorf("comm: init: %w", context.Cause(ctx))
	}
	made.Store(c)
	return c, err
}

// New joins the job that cfg describes.
func New(ctx context.Context, cfg Config, opts ...Option) (*Communicator, error) {
	s, err := readSettings(opts)
	if err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	algos, err := collectives.ParseAlgos(s.algo)
	if err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok && s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	c := &Communicator{cfg: cfg, log: s.logger, closed: make(chan struct{}),
		timeout: s.timeout, aborted: make(chan struct{})}
	// A rank that dies before it connects leaves the others waiting for
	// its address or its connection, where no link can tell them: the
	// store can, so Init listens to it until everyone is connected.
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if cfg.Size > 1 && cfg.Addr != "" {
		go watchDepartures(ictx, stop, cfg)
	}
	fail := func(what string, err error) (*Communicator, error) {
		if cause := context.Cause(ictx); errors.Is(cause, bootstrap.ErrRankGone) {
			err = cause
		} else if !errors.Is(err, bootstrap.ErrJoinRefused) { // not of this job: its departures are not ours
			err = c.withDepartures(err)
		}
		c.drop(err)
		c.shutdown()
		return nil, fmt.Errorf("comm: rank %d of %d: %s%w", cfg.Rank, cfg.Size, what, err)
	}
	if err := c.connect(ictx, s); err != nil {
		return fail("", err)
	}
	c.g = collectives.NewGroup(c.share(), collectives.Options{Algos: algos, Logger: c.log, Hosts: c.hosts})
	// Nobody returns from Init before everyone is connected, so a rank that
	// finishes its first collective and closes early cannot strand a peer
	// still reading addresses from the store.
	if err := c.g.Barrier(ictx); err != nil {
		return fail("waiting for every rank to connect: ", err)
	}
	go c.watch()
	c.log.Info("communicator ready", "rank", cfg.Rank, "size", cfg.Size, "local_rank", cfg.LocalRank,
		"launcher", cfg.Source, "transport", c.tname, "simd", reduce.SIMDLevel(), "store", cfg.Addr)
	return c, nil
}

func readSettings(opts []Option) (settings, error) {
	s := settings{
		transport: os.Getenv("GOCOLL_TRANSPORT"),
		algo:      os.Getenv("GOCOLL_ALGO"),
	}
	// The kernels read GOCOLL_SIMD once, at start-up; a value they could
	// not honour is bad input, not a detail to log and ignore.
	if err := reduce.SIMDConfigError(); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := logging.Check(os.Getenv("GOCOLL_DEBUG")); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if v := strings.TrimSpace(os.Getenv("GOCOLL_TIMEOUT")); v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return s, err
		}
		s.timeout = d
	}
	for _, o := range opts {
		o(&s)
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.logger == nil {
		s.logger = logging.L()
	}
	s.rdma.Device = strings.TrimSpace(os.Getenv("GOCOLL_IB_DEV"))
	if v := strings.TrimSpace(os.Getenv("GOCOLL_IB_GID_INDEX")); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 || i > 255 {
			return s, fmt.Errorf("GOCOLL_IB_GID_INDEX=%q: want a GID table index 0..255: %w", v, ErrInvalid)
		}
		s.rdma.GIDIndex = i
	}
	s.transport = strings.ToLower(strings.TrimSpace(s.transport))
	switch s.transport {
	case "", "auto":
		s.transport = "auto" // decided at connect, from where the ranks run and what they have
	case "tcp", "shm", "rdma":
	default:
		return s, fmt.Errorf("GOCOLL_TRANSPORT=%q: unknown transport (want auto, tcp, shm or rdma): %w", s.transport, ErrInvalid)
	}
	return s, nil
}

// parseTimeout accepts a Go duration ("90s", "2m") or plain seconds ("90").
func parseTimeout(v string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("GOCOLL_TIMEOUT=%q: want a positive duration such as 90s or 2m: %w", v, ErrInvalid)
	}
	return d, nil
}

func (c *Communicator) connect(ctx context.Context, s settings) error {
	cfg := c.cfg
	if cfg.Serve {
		srv, err := bootstrap.ServeFor(cfg)
		if err != nil {
			return err
		}
		c.server = srv
	}
	if cfg.Size == 1 && cfg.Addr == "" {
		t, err := tcp.Connect(ctx, nil, 0, 1, cfg.Token, s.tcp)
		c.t, c.tname = t, "none (one rank)"
		return err
	}
	store, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
	if err != nil {
		return err
	}
	c.store = store
	if err := store.Join(ctx, cfg.Rank, cfg.Size, cfg.Job); err != nil {
		return err
	}
	t, hosts, name, err := c.connectTransport(ctx, store, s)
	if err != nil {
		if errors.Is(err, bootstrap.ErrRankGone) {
			err = fmt.Errorf("%w: %w", ErrPeerLost, err)
		}
		return err
	}
	c.t, c.hosts, c.tname = t, hosts, name
	return nil
}

// Transport names the transport Init chose: "tcp", "shm", "rdma",
// "shm+tcp" (shared memory inside each host, TCP between), ...
func (c *Communicator) Transport() string { return c.tname }

// Rank is this process's rank, in [0, Size()).
func (c *Communicator) Rank() int { return c.cfg.Rank }

// Size is the number of ranks in the job.
func (c *Communicator) Size() int { return c.cfg.Size }

// LocalRank is this process's rank among those on its host, or -1 if the
// launcher did not say.
func (c *Communicator) LocalRank() int { return c.cfg.LocalRank }

// Err reports why the communicator is unusable (closed, aborted or
// broken), or nil.
func (c *Communicator) Err() error {
	if err := c.unusable(); err != nil {
		return err
	}
	if b := c.broken.Load(); b != nil {
		return *b
	}
	return nil
}

// Close leaves the job and releases every resource. Collectives still
// running return ErrClosed. It is safe to call more than once.
func (c *Communicator) Close() error {
	if c == nil {
		return nil
	}
	if !c.closing.CompareAndSwap(false, true) {
		return nil
	}
	c.stopping.Store(true)
	close(c.closed)
	return c.shutdown()
}

func (c *Communicator) shutdown() error {
	var errs []error
	if c.t != nil {
		errs = append(errs, c.t.Close())
	}
	if c.store != nil {
		c.leave("")
		c.store.Close()
	}
	if c.server != nil {
		errs = append(errs, c.server.Close())
	}
	return errors.Join(errs...)
}

// run admits one collective at a time and turns the outcome into the
// communicator's state: a failure part-way leaves the ranks out of step, so
// it breaks the communicator for good.
func (c *Communicator) run(ctx context.Context, what string, f func(context.Context) error) error {
	if c == nil {
		return errNil(what)
	}
	tk, mine := c.issue()
	if !mine {
		return c.runAt(ctx, tk, mine, what, f)
	}
	// The usual blocking call, whose turn has come: runAt without its
	// frame and its closure, a measurable share of a small collective.
	// The ticket of a blocking call has no then, so the error need not
	// reach pass, and the turn still moves on whatever happens in f.
	defer c.pass(tk, true, nil)
	return c.runTurn(ctx, tk, what, f)
}

// admit waits for the collectives issued before tk to be done.
func (c *Communicator) admit(ctx context.Context, tk ticket, what string) error {
	if c.turns.waitTurn(ctx, tk, c.closed, c.aborted) {
		return nil
	}
	if err := c.unusable(); err != nil {
		return fmt.Errorf("comm: %s: %w", what, err)
	}
	return fmt.Errorf("comm: %s: waiting for the previous collective: %w", what, ctx.Err())
}

// runAt is run for the collective issued with ticket tk: unless its turn
// had come when it was issued (mine), it waits for the collectives issued
// before it on this rank (see async.go).
func (c *Communicator) runAt(ctx context.Context, tk ticket, mine bool, what string, f func(context.Context) error) (err error) {
	if !mine {
		if err := c.admit(ctx, tk, what); err != nil {
			c.pass(tk, false, err)
			return err
		}
	}
	// Deferred, so that the turn moves on whatever happens in f.
	defer func() { c.pass(tk, true, err) }()
	return c.runTurn(ctx, tk, what, f)
}

// runTurn runs f, whose turn it is, and turns its failure into the
// communicator's state. The checks before f are loads of flags that are
// almost never set; what they guard is out of line, in why.
func (c *Communicator) runTurn(ctx context.Context, tk ticket, what string, f func(context.Context) error) error {
	if c.stopping.Load() || c.broken.Load() != nil || c.faulted.Load() || ctx.Err() != nil {
		if err := c.why(ctx, what); err != nil {
			return err
		}
	}
	if _, bounded := ctx.Deadline(); bounded {
		// The watchdog's timeout is for contexts without a deadline.
		c.bounded.Store(tk.n + 1)
	}
	if err := f(ctx); err != nil {
		return c.failed(what, err)
	}
	return nil
}

// why is the error of a collective that may not run, or nil if it may
// after all (Close or Abort has set stopping but not yet closed its
// channel).
func (c *Communicator) why(ctx context.Context, what string) error {
	if err := c.unusable(); err != nil {
		return fmt.Errorf("comm: %s: %w", what, err)
	}
	if b := c.broken.Load(); b != nil {
		return fmt.Errorf("comm: %s: %w (cause: %w)", what, ErrBroken, *b)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("comm: %s: %w", what, err)
	}
	if !c.faulted.Load() {
		return nil
	}
	err := c.faultErr()
	c.setBroken(err)
	return fmt.Errorf("comm: rank %d: %s: %w", c.cfg.Rank, what, err)
}

// failed is the error of a collective that failed with err, and breaks
// the communicator unless the ranks are still in step.
func (c *Communicator) failed(what string, err error) error {
	if errors.Is(err, ErrInvalid) {
		// The collectives refuse bad arguments before sending anything,
		// so the ranks are still in step.
		return fmt.Errorf("comm: %s: %w", what, err)
	}
	if uerr := c.unusable(); uerr != nil {
		// Close or Abort woke the call; that, not the transport's view of
		// it, is the cause.
		if errors.Is(uerr, ErrAborted) {
			c.setBroken(uerr)
		}
		return fmt.Errorf("comm: rank %d: %s: %w", c.cfg.Rank, what, uerr)
	}
	if ferr := c.faultErr(); ferr != nil {
		ferr = c.withLosses(ferr)
		c.setBroken(ferr)
		return fmt.Errorf("comm: rank %d: %s: %w", c.cfg.Rank, what, ferr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	err = c.withLosses(err)
	c.setBroken(err)
	// The ranks are out of step now, and a peer may be waiting for data
	// this rank will never send. Dropping the connections tells every peer
	// at once (their calls fail with ErrPeerLost naming this rank) instead
	// of leaving them to hang until their own deadlines.
	c.drop(err)
	c.log.Info("communicator broken; dropped its connections so the peers notice", "rank", c.cfg.Rank, "err", err)
	return fmt.Errorf("comm: rank %d: %w", c.cfg.Rank, err)
}

func (c *Communicator) setBroken(err error) { c.broken.Store(&err) }

// lossSettle is how long the watchdog lets further losses arrive after the
// first, before it fails the running collective.
const lossSettle = 20 * time.Millisecond

// withLosses adds to err, a failure through a lost peer, every peer the
// transport has seen lost by now. The link that failed first here may be
// to a rank that only gave up because another died, and could not say so
// (its connection to us was mid-frame); the list names the rank that died.
func (c *Communicator) withLosses(err error) error {
	if !errors.Is(err, ErrPeerLost) {
		return err
	}
	var notes []string
	if ln, ok := c.t.(transport.LossNotifier); ok {
		var list []*transport.PeerError
		switch lost := ln.LostErr().(type) {
		case *transport.PeerError:
			list = append(list, lost)
		case transport.Losses:
			list = lost
		}
		text := err.Error()
		for _, pe := range list {
			// Ranks that gave up say why themselves; repeating each
			// one's story would bury the rank that died.
			if t := pe.Err.Error(); !strings.Contains(text, t) && !strings.Contains(t, " gave up: ") {
				notes = append(notes, fmt.Sprintf("rank %d: %v", pe.Peer, pe.Err))
			}
		}
	}
	if len(notes) > 0 {
		err = fmt.Errorf("%w (also lost: %s)", err, strings.Join(notes, "; "))
	}
	return c.withDepartures(err)
}

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
	case derr != nil:
		return fmt.Errorf("%w (rendezvous unreachable too: %v)", err, derr)
	case len(ds) > 0 && !strings.Contains(err.Error(), ds[0].String()):
		return fmt.Errorf("%w (the rendezvous saw %s)", err, departures(ds))
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

// watchDepartures cancels ctx, with a cause wrapping ErrPeerLost and
// bootstrap.ErrRankGone, as soon as the store sees a rank leave the job
// abnormally. It has a store connection of its own: the communicator's
// is busy with the waiting gets.
func watchDepartures(ctx context.Context, stop context.CancelCauseFunc, cfg Config) {
	w, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
	if err != nil {
		return
	}
	defer w.Close()
	for ctx.Err() == nil {
		ds, err := w.Departures(ctx, 10*time.Second)
		if err != nil {
			return
		}
		if len(ds) > 0 {
			stop(fmt.Errorf("%w: %w: the rendezvous saw %s", ErrPeerLost, bootstrap.ErrRankGone, departures(ds)))
			return
		}
	}
}

// departuresWait bounds how long a rank that lost a peer waits for the
// store to see the departure that caused it: the store notices a death as
// soon as the kernel closes the dead rank's connection, within
// milliseconds, but may not have when we ask.
const departuresWait = 300 * time.Millisecond

// leave tells the store this rank is out: why is empty at a normal Close,
// else the cause of the break, which the others then see.
func (c *Communicator) leave(why string) {
	if c.store == nil {
		return
	}
	if len(why) > 300 {
		why = why[:297] + "..."
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.store.Leave(ctx, why)
}

// watch is the communicator's watchdog. It turns two things a running
// collective cannot see from where it waits into errors: a peer lost
// anywhere in the job, and a collective that runs longer than the timeout
// while its context has no deadline (GOCOLL_TIMEOUT). Watching from here
// keeps the cost off the collectives: they only store their start time.
func (c *Communicator) watch() {
	var lost <-chan struct{}
	ln, _ := c.t.(transport.LossNotifier)
	if ln != nil {
		lost = ln.Lost()
	}
	var tick <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTicker(min(max(c.timeout/20, 10*time.Millisecond), time.Second))
		defer t.Stop()
		tick = t.C
	}
	// The collective seen running on the last tick (1 + its ticket; 0
	// for none), and since when: the collectives store nothing for this,
	// as reading the clock would cost them more than the rest of a small
	// one's bookkeeping.
	var seen uint64
	var since time.Time
	for {
		select {
		case <-c.closed:
			return
		case <-c.aborted:
			return
		case <-lost:
			lost = nil
			// A rank that gave up because another died resets its links
			// at about the time the dead rank's links end: wait a moment
			// for those too, so that the error names the rank that died,
			// not only the first link to go.
			select {
			case <-c.closed:
				return
			case <-c.aborted:
				return
			case <-time.After(lossSettle):
			}
			err := ln.LostErr()
			if _, running := c.turns.inFlight(); running {
				c.setFault(err)
				return
			}
			// Nothing runs: the next collective fails with it (run checks).
			c.faultMu.Lock()
			c.lostErr = err
			c.faulted.Store(true)
			c.faultMu.Unlock()
		case now := <-tick:
			turn, running := c.turns.inFlight()
			if !running {
				seen = 0
			} else if turn+1 != seen {
				seen, since = turn+1, now
			}
			if running && c.bounded.Load() != turn+1 && now.Sub(since) > c.timeout {
				c.setFault(fmt.Errorf("%w: a collective ran longer than %v (GOCOLL_TIMEOUT) while its context had no deadline: %w",
					ErrTimeout, c.timeout, context.DeadlineExceeded))
				return
			}
		}
	}
}

// setFault records why the running collective must fail and wakes it by
// closing the transport, which also tells every peer.
func (c *Communicator) setFault(err error) {
	c.faultMu.Lock()
	if c.fault == nil {
		c.fault = err
	}
	c.faulted.Store(true)
	c.faultMu.Unlock()
	c.log.Info("communicator fault; dropping its connections", "rank", c.cfg.Rank, "err", err)
	c.drop(err)
}

func (c *Communicator) faultErr() error {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	if c.fault != nil {
		return c.fault
	}
	return c.lostErr
}

// unusable is ErrClosed after Close, the abort error after Abort, else nil.
func (c *Communicator) unusable() error {
	if !c.stopping.Load() {
		return nil
	}
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	select {
	case <-c.aborted:
		return c.abortErr
	default:
	}
	return nil
}

// Abort breaks the communicator from any goroutine, as ncclCommAbort does:
// every collective pending on this rank returns an error wrapping
// ErrAborted and reason, so does every later one, and the connections are
// dropped, so that the peers' pending and later calls fail with ErrPeerLost
// naming this rank instead of waiting for it. Abort does not wait for the
// peers; Close must still be called to release the rest. Only the first
// Abort counts.
func (c *Communicator) Abort(reason error) {
	if c == nil {
		return
	}
	c.abortOnce.Do(func() {
		if reason == nil {
			reason = errors.New("no reason given")
		}
		c.abortErr = fmt.Errorf("%w: %w", ErrAborted, reason)
		c.stopping.Store(true)
		close(c.aborted)
		c.log.Info("communicator aborted; dropping its connections", "rank", c.cfg.Rank, "reason", reason)
		c.drop(c.abortErr)
	})
}

// drop cuts every connection so that the peers see this rank lost and stop
// waiting for it: at once where the transport can abort, else by an
// orderly Close, which lingers for the peers' goodbyes (a peer busy
// computing may not send one for a while, and the caller need not wait).
func (c *Communicator) drop(cause error) {
	if c.t == nil {
		return
	}
	if cause != nil {
		go c.leave(cause.Error())
	}
	if a, ok := c.t.(transport.Aborter); ok {
		a.Abort(cause)
		return
	}
	go c.t.Close()
}

// Barrier returns once every rank has called it.
func (c *Communicator) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", func(ctx context.Context) error { return c.g.Barrier(ctx) })
}
