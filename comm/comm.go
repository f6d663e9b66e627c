package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/calltrace"
	"github.com/gocoll/gocoll/internal/elastic"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/sentinel"
	envset "github.com/gocoll/gocoll/internal/settings"
	"github.com/gocoll/gocoll/internal/wiring"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// Config is an explicit job description, for programs that do not rely on
// a launcher's environment. See bootstrap.Config for the fields.
type Config = bootstrap.Config

// Errors a program can test for with errors.Is.
var (
	// ErrClosed: the communicator was closed.
	ErrClosed = sentinel.Closed
	// ErrBroken: an earlier collective failed part-way (peer lost, context
	// ended, mismatch), so the ranks are no longer in step; the error also
	// wraps the original cause. Close it and start again.
	ErrBroken = sentinel.Broken
	// ErrInvalid: a bad argument (root out of range, buffer sizes that do
	// not fit, overlapping buffers, a nil context). Nothing was sent, but
	// the other ranks are in the call too and cannot see the refusal, so
	// on a job of several ranks a refused collective breaks the
	// communicator and the others' call fails with ErrMismatch naming
	// this rank. Refused point-to-point calls leave it usable.
	ErrInvalid = collectives.ErrInvalid
	// ErrUnsupported: an element type and operation that do not go
	// together, such as Avg on integers. A refusal, as ErrInvalid. Also
	// what Grow, and a replacement's Init, return on a transport that
	// cannot link to a process started later (TCP with
	// GOCOLL_TCP_CONNECT=eager): the error names the transport.
	ErrUnsupported = sentinel.Unsupported
	// ErrMismatch: ranks called different collectives, or the same one with
	// different arguments. The message says what each side called.
	ErrMismatch = collectives.ErrMismatch
	// ErrPeerLost: a peer died or its connection failed.
	ErrPeerLost = transport.ErrPeerLost
	// ErrEnv: the launch environment is missing or contradictory.
	ErrEnv = bootstrap.ErrEnv
	// ErrAborted: Abort was called on this rank; the error also wraps the
	// reason given to Abort.
	ErrAborted = sentinel.Aborted
	// ErrTimeout: a collective ran past its deadline (the context's, or
	// GOCOLL_TIMEOUT when the context has none). It is returned together
	// with context.DeadlineExceeded, so either test works.
	ErrTimeout = sentinel.Timeout
	// ErrUnconfirmed: Close could not learn, within the communicator's
	// timeout, the last call of the rank it names (alive, but it neither
	// closed nor went on to another call), so it cannot say the last
	// calls matched.
	ErrUnconfirmed = sentinel.Unconfirmed
)

// Communicator is this process's membership in a job: its rank, its
// connections to the other ranks (over TCP, made as calls first need
// them; see GOCOLL_TCP_CONNECT), and the collectives over them. Its
// methods and the collective functions are safe to call from several
// goroutines, but collectives on one communicator run one at a time, and
// every rank must issue them in the same order, as with MPI and NCCL.
type Communicator struct {
	cfg   Config
	t     transport.Transport
	g     *collectives.Group
	store *bootstrap.Client
	// linkStore is the network transports' own store connection (TCP's
	// and RDMA's), for the addresses of the peers they link to as calls
	// need them.
	linkStore *bootstrap.Client
	// calls is the store where a stalled collective publishes what it
	// called (stall.go): the job's, shared by its sub-communicators;
	// nil for a job of one rank.
	calls  *bootstrap.Client
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
	// endedOK: the latest collective returned nil, so its caller was
	// told of no fault the watchdog found while it ran (see untold).
	endedOK atomic.Bool

	// life ends when a sub-communicator is aborted or breaks: its links
	// are the job's, which stay up, so its running call is woken this way
	// instead (see drop). Nil for the job's communicator.
	life context.Context
	kill context.CancelCauseFunc
	// published is set once this rank has told the others, through the
	// store, why it is dropping out (see publishFault).
	published atomic.Bool
	// act is what the watchdog sees this communicator doing, and kids
	// (the job's communicator only) its live sub-communicators, for the
	// stall report (report.go); stallAfter is GOCOLL_STALL.
	act        activity
	kids       subs
	stallAfter time.Duration
	// trace is the rank's GOCOLL_TRACE file, shared with the
	// sub-communicators; traced the last call written to it.
	trace   *calltrace.File
	traceMu sync.Mutex // the watchdog's drains and Close's
	traced  uint64
	// leaving counts the reports of a break on their way to the store
	// (see drop), which Close waits for; leavingMu orders drop's Add
	// before that Wait, and leavingDone says the Wait has begun, after
	// which a report is no longer sent (the store is closing).
	leaving     sync.WaitGroup
	leavingMu   sync.Mutex
	leavingDone bool

	// elastic: a failure ends this communicator alone and leaves the
	// connections to the live ranks up, for Shrink (elastic.go).
	elastic bool
	// leavers carries the store's word that a rank left the job
	// abnormally, for a transport that is not linked to every rank
	// (TCP's links on demand): no link may tell (see tellLeavers).
	leavers chan error

	hosts []int  // each rank's host, for the host-aware algorithms
	tname string // the transport chosen
	// plan is the job's plan (plan.go), agreed at Init, inherited by
	// Split, Shrink and Grow, taken from the store by a replacement.
	plan plan.Plan
	ext  ext     // sub-communicators, point-to-point, issue order (split.go, async.go)
	win  windows // memory from Alloc (alloc.go)
}

// Option adjusts how a communicator is built.
type Option func(*settings)

type settings struct {
	wiring.Options
	algo     string
	timeout  time.Duration
	stall    time.Duration
	stallSet bool
	trace    string
	logger   *slog.Logger
	traffic  *collectives.Traffic // WithTraffic (traffic.go)
}

// WithTransport picks the transport: "auto" (default), "tcp", "shm", "rdma".
// It overrides GOCOLL_TRANSPORT.
func WithTransport(name string) Option { return func(s *settings) { s.Transport = name } }

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
func WithTCPOptions(o tcp.Options) Option { return func(s *settings) { s.TCP = o } }

// WithSHMOptions tunes the shared-memory transport (slot count and size).
func WithSHMOptions(o shm.Options) Option { return func(s *settings) { s.SHM = o } }

// DefaultTimeout is how long Init, or a collective, may take when neither
// its context, WithTimeout nor GOCOLL_TIMEOUT sets a bound. It is long,
// because a rank may reach a collective long after its peers (a slow
// checkpoint, uneven work); it is finite, because a job that hangs for
// good costs more than one that fails.
const DefaultTimeout = 10 * time.Minute

// Init joins the job described by the launcher's environment (grun,
// torchrun-style, Open MPI or Slurm; see bootstrap.FromEnv), or, in a
// process no launcher started (none of their variables set), returns a
// communicator of one rank (see bootstrap.Singleton), and connects to
// the other ranks: to every one with GOCOLL_TCP_CONNECT=eager (TCP) or
// GOCOLL_RDMA_CONNECT=eager (RDMA), or by default to the partners of a
// first allreduce, the rest (links, shared-memory rings, RDMA queue pairs)
// as calls need them. It returns once every rank
// has joined and that allreduce has run among them all. A rank a
// launcher started leaves, from Init on, if that launcher exits
// (ErrLauncherGone). In an elastic job that runs already, the process is
// a replacement (grun --elastic MIN:MAX starts them): Init waits until
// the running ranks admit it, and returns the communicator their Grow
// made (see Communicator.Grow and Communicator.Joined).
func Init(ctx context.Context, opts ...Option) (*Communicator, error) {
	if ctx == nil {
		return nil, errNilContext("init")
	}
	cfg, err := launchConfig(os.LookupEnv)
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
	if err == nil {
		saySingleton(c)
	}
	return c, err
}

// New joins the job that cfg describes.
func New(ctx context.Context, cfg Config, opts ...Option) (*Communicator, error) {
	if ctx == nil {
		return nil, errNilContext("new")
	}
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
	// Every line names the rank: N ranks would otherwise print N
	// identical lines.
	c := &Communicator{cfg: cfg, log: s.logger.With("rank", cfg.Rank), closed: make(chan struct{}),
		timeout: s.timeout, aborted: make(chan struct{}), stallAfter: s.stall,
		plan: settingsPlan(s, algos, cfg.HalfAccum)}
	// A rank that dies before it connects leaves the others waiting for
	// its address or its connection, where no link can tell them: the
	// store can, so Init listens to it until everyone is connected
	// (answerReports, which goes on to answer stall reports once the
	// communicator is ready, on the same store connection).
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if s.Elastic && cfg.Size > 1 && cfg.Addr != "" && !cfg.Serve {
		// A process started after an elastic job began is a
		// replacement: it joins the running job (see Grow).
		store, err := elastic.Running(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("comm: rank %d of %d: %w", cfg.Rank, cfg.Size, err)
		}
		if store != nil {
			return join(ctx, cfg, s, store)
		}
	}
	ready := make(chan struct{})
	endWatch := func() {}
	if cfg.Size > 1 && cfg.Addr != "" {
		var wctx context.Context
		wctx, endWatch = context.WithCancel(context.Background())
		go c.answerReports(wctx, stop, ready)
	}
	fail := func(what string, err error) (*Communicator, error) {
		defer endWatch()
		if errors.Is(err, ErrEnv) {
			// This rank's own settings disagree with the job's plan:
			// the cause is here, whatever departures (its own among
			// them) the store has seen since.
		} else if cause := context.Cause(ictx); errors.Is(cause, bootstrap.ErrRankGone) {
			err = cause
		} else if !errors.Is(err, bootstrap.ErrJoinRefused) { // not of this job: its departures are not ours
			err = blame.InitLoss(c.names(), c.withDepartures(err))
		}
		if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w%s: %w", ErrTimeout, neverArrived(cfg), err)
		}
		c.drop(err)
		c.shutdown()
		return nil, fmt.Errorf("comm: rank %d of %d: %s%w", cfg.Rank, cfg.Size, what, err)
	}
	if err := c.connect(ictx, s); err != nil {
		return fail("", err)
	}
	// The agreement is an allreduce, so nobody returns from Init before
	// everyone is connected: a rank that finishes its first collective and
	// closes early cannot strand a peer still reading addresses from the
	// store.
	maxMessage, costly, err := agreeTransports(ictx, c.t)
	if err != nil {
		return fail("waiting for every rank to connect: ", err)
	}
	c.plan.MaxMessage, c.plan.StepCostly = maxMessage, costly
	gopts, err := c.groupOptions()
	if err != nil {
		return fail("", err)
	}
	gopts.Hosts, gopts.Traffic = c.hosts, s.traffic
	if s.trace != "" {
		if c.trace, err = calltrace.Open(s.trace, cfg.Rank); err != nil {
			return fail("", err)
		}
		gopts.Timed, gopts.Recorded = true, calltrace.Calls
	}
	c.g = collectives.NewGroup(c.share(maxMessage), gopts)
	c.calls = c.store
	if s.Elastic && c.calls != nil {
		// A failure ends the job's communicator as it ends a
		// sub-communicator, through its life, keeping the links.
		c.elastic = true
		c.life, c.kill = context.WithCancelCause(context.Background())
		if err := c.sayRunning(ictx, maxMessage); err != nil {
			return fail("", err)
		}
	}
	// Links made on demand (TCP's, shared memory's and RDMA's unless
	// eager) leave a rank with no link to most peers: the store's word
	// of a departure is then how it learns of theirs.
	onDemand := strings.Contains(c.tname, "tcp") && !s.TCP.Eager ||
		strings.Contains(c.tname, "shm") && !s.SHM.Eager ||
		strings.Contains(c.tname, "rdma") && !s.RDMA.Eager
	if cfg.Size > 1 && cfg.Addr != "" && onDemand {
		c.leavers = make(chan error, 1) // answerReports watches
	}
	go c.watch()
	close(ready)
	c.log.Info("communicator ready", "size", cfg.Size, "local_rank", cfg.LocalRank,
		"launcher", cfg.Source, "transport", c.tname, "simd", reduce.SIMDLevel(), "store", cfg.Addr,
		"plan", fmt.Sprintf("%016x", c.plan.Fingerprint()), "step_costly", c.plan.StepCostly, "max_message", c.plan.MaxMessage)
	return c, nil
}

// readSettings is the environment's settings (internal/settings, where
// every GOCOLL_* variable is parsed) with opts applied.
func readSettings(opts []Option) (settings, error) {
	var s settings
	env, err := envset.Read(os.LookupEnv)
	if err != nil {
		return s, fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	// The kernels read GOCOLL_SIMD once, at start-up; a value they could
	// not honour is bad input, not a detail to log and ignore.
	if err := reduce.SIMDConfigError(); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.Transport, s.algo, s.timeout, s.trace, s.Elastic = env.Transport, env.Algo, env.Timeout, env.Trace, env.Elastic
	s.FakeEnv = env.FakeHosts
	if env.StallSet {
		s.stall, s.stallSet = env.Stall, true
	}
	for _, o := range opts {
		o(&s)
	}
	if env.SpinSet {
		// Options given in code keep their own budget.
		for _, spin := range []*time.Duration{&s.TCP.Spin, &s.SHM.Spin, &s.RDMA.Spin} {
			if *spin == 0 {
				*spin = env.Spin
			}
		}
	}
	if s.SHM.NonTemporal == shm.NonTemporalAuto {
		// An option given in code wins, as for GOCOLL_SPIN.
		switch env.SHMNonTemporal {
		case "on":
			s.SHM.NonTemporal = shm.NonTemporalOn
		case "off":
			s.SHM.NonTemporal = shm.NonTemporalOff
		}
	}
	switch env.TCPConnect {
	case "warm":
		s.TCPWarm = true
	case "eager":
		s.TCP.Eager = true
	}
	if env.Encrypt {
		s.TCP.Encrypt = true
	}
	if env.RDMAConnect == "eager" {
		s.RDMA.Eager = true
	}
	if !s.stallSet {
		s.stall = DefaultStall
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.logger == nil {
		s.logger = logging.L()
	}
	if env.IBDev != "" {
		s.RDMA.Device = env.IBDev
	}
	if env.IBGIDIndex != 0 {
		s.RDMA.GIDIndex = env.IBGIDIndex
	}
	s.Transport = strings.ToLower(strings.TrimSpace(s.Transport))
	switch s.Transport {
	case "", "auto":
		s.Transport = "auto" // decided at connect, from where the ranks run and what they have
	case "tcp", "shm", "rdma":
	default:
		return s, fmt.Errorf("transport %q (WithTransport): want auto, tcp, shm or rdma: %w", s.Transport, ErrInvalid)
	}
	return s, nil
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
		t, err := tcp.Connect(ctx, nil, 0, 1, cfg.Token, s.TCP)
		if err != nil {
			// A nil *Transport would be a transport that is not nil.
			return err
		}
		c.t, c.tname = t, "none (one rank)"
		return nil
	}
	store, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return err
	}
	c.store = store
	if err := store.Join(ctx, cfg.Rank, cfg.Size, cfg.Job); err != nil {
		return err
	}
	if err := c.agreeSettings(ctx, store); err != nil {
		return err
	}
	w, err := wiring.Connect(ctx, store, cfg, s.Options, c.log)
	if err != nil {
		if errors.Is(err, bootstrap.ErrRankGone) {
			err = fmt.Errorf("%w: %w", ErrPeerLost, err)
		}
		return err
	}
	c.t, c.hosts, c.tname, c.linkStore, c.ext.spare = w.Transport, w.Hosts, w.Name, w.LinkStore, w.Spare
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

// LocalSize is the number of ranks on this process's host, or -1 if the
// launcher did not say.
func (c *Communicator) LocalSize() int {
	if c.cfg.LocalSize <= 0 {
		return -1
	}
	return c.cfg.LocalSize
}

// Err reports why the communicator is unusable, or nil: ErrClosed,
// ErrAborted, or ErrBroken wrapping the failure that broke it.
func (c *Communicator) Err() error {
	if err := c.unusable(); err != nil {
		return err
	}
	if b := c.broken.Load(); b != nil {
		return fmt.Errorf("%w: %w", ErrBroken, *b)
	}
	return nil
}

// Close leaves the job and releases every resource. Collectives still
// running return ErrClosed. It is safe to call more than once.
//
// Close compares this rank's last calls with those of the ranks closing
// with it: ranks that named different roots in a last broadcast or
// scatter can each finish it believing their own result, and only then
// can it be seen. Close then returns an error wrapping ErrMismatch,
// saying what each called; everything is released all the same. Like
// MPI_Finalize, Close is collective: it waits until every other rank has
// closed, gone on to a later call, failed, or left the job. A rank
// neither heard from nor gone within the communicator's timeout
// (WithTimeout, GOCOLL_TIMEOUT) makes Close return an error wrapping
// ErrUnconfirmed naming it, never nil: the last calls might not have
// matched. Likewise, if every call passed on this rank while another
// rank of the communicator died or left the job without closing (it had
// no part in this rank's last calls: a leaf of a broadcast, say), Close
// returns an error wrapping ErrPeerLost that names it.
func (c *Communicator) Close() error {
	if c == nil {
		return nil
	}
	if !c.closing.CompareAndSwap(false, true) {
		return nil
	}
	if c.ext.root != nil {
		c.ext.root.kids.remove(c)
	}
	c.sayClosed()
	if c.kill == nil && c.broken.Load() == nil && !c.faulted.Load() {
		// Say so first, while the store connection is sure to be in
		// step: a request of the comparison below cut short by its
		// deadline breaks it, and a rank whose connection ends without
		// this is taken for dead by the ranks still at work (over TCP
		// links made on demand, they ask the store; see tellLeavers).
		c.leave("")
	}
	if c.g != nil && c.broken.Load() == nil {
		c.board().PublishLast(c.g.Recent())
	}
	said := c.lastCallsAgree()
	c.board().SaidChecked()
	if c.server != nil {
		c.board().LingerForChecks(c.closeBound())
	}
	c.stopping.Store(true)
	close(c.closed)
	c.drainTrace(true)
	err := c.shutdown()
	if werr := c.win.freeAll(); werr != nil && err == nil {
		err = werr
	}
	if c.trace != nil && c.ext.root == nil {
		if terr := c.trace.Close(); terr != nil && err == nil {
			err = fmt.Errorf("comm: rank %d: close: GOCOLL_TRACE: %w", c.cfg.Rank, terr)
		}
	}
	if c.ext.shrunkFrom != nil {
		// This one owns the job's connections now (see Shrink).
		if perr := c.ext.shrunkFrom.Close(); perr != nil && err == nil && !errors.Is(perr, ErrMismatch) {
			err = perr
		}
	}
	if said != nil {
		return said
	}
	return err
}

func (c *Communicator) shutdown() error {
	var errs []error
	if c.t != nil {
		errs = append(errs, c.t.Close())
	}
	if c.linkStore != nil {
		c.linkStore.Close()
	}
	if c.store != nil {
		c.leavingMu.Lock()
		c.leavingDone = true
		c.leavingMu.Unlock()
		c.leaving.Wait()
		c.leave("")
		c.store.Close()
	}
	if c.server != nil {
		errs = append(errs, c.server.Close())
	}
	return errors.Join(errs...)
}
