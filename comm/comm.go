package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/transport"
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
	ErrInvalid = errors.New("invalid argument")
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

	// sem admits one collective at a time; waiting for it honours ctx.
	sem    chan struct{}
	broken error // guarded by sem
	closed chan struct{}
}

// Option adjusts how a communicator is built.
type Option func(*settings)

type settings struct {
	transport string
	algo      string
	timeout   time.Duration
	logger    *slog.Logger
	tcp       tcp.Options
}

// WithTransport picks the transport: "auto" (default), "tcp", "shm", "rdma".
// It overrides GOCOLL_TRANSPORT.
func WithTransport(name string) Option { return func(s *settings) { s.transport = name } }

// WithAlgorithm forces algorithms, in GOCOLL_ALGO syntax ("ring", or
// "allreduce=rd,broadcast=chain"). It overrides GOCOLL_ALGO.
func WithAlgorithm(spec string) Option { return func(s *settings) { s.algo = spec } }

// WithTimeout bounds how long Init waits for the other ranks when ctx has
// no deadline of its own. It overrides GOCOLL_TIMEOUT.
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithLogger sends the library's log lines to l instead of the
// GOCOLL_DEBUG-configured stderr logger.
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// WithTCPOptions tunes the TCP transport (slot count and size).
func WithTCPOptions(o tcp.Options) Option { return func(s *settings) { s.tcp = o } }

// DefaultTimeout is how long Init waits for the other ranks by default.
const DefaultTimeout = 5 * time.Minute

// Init joins the job described by the launcher's environment (grun,
// torchrun-style, Open MPI or Slurm; see bootstrap.FromEnv) and connects to
// every other rank. It returns once every rank has connected.
func Init(ctx context.Context, opts ...Option) (*Communicator, error) {
	cfg, err := bootstrap.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("comm: init: %w", err)
	}
	return New(ctx, cfg, opts...)
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
	c := &Communicator{cfg: cfg, log: s.logger, sem: make(chan struct{}, 1), closed: make(chan struct{})}
	if err := c.connect(ctx, s); err != nil {
		c.shutdown()
		return nil, fmt.Errorf("comm: rank %d of %d: %w", cfg.Rank, cfg.Size, err)
	}
	c.g = collectives.NewGroup(c.t, collectives.Options{Algos: algos, Logger: c.log})
	// Nobody returns from Init before everyone is connected, so a rank that
	// finishes its first collective and closes early cannot strand a peer
	// still reading addresses from the store.
	if err := c.g.Barrier(ctx); err != nil {
		c.shutdown()
		return nil, fmt.Errorf("comm: rank %d of %d: waiting for every rank to connect: %w", cfg.Rank, cfg.Size, err)
	}
	c.log.Info("communicator ready", "rank", cfg.Rank, "size", cfg.Size, "local_rank", cfg.LocalRank,
		"launcher", cfg.Source, "transport", s.transport, "store", cfg.Addr)
	return c, nil
}

func readSettings(opts []Option) (settings, error) {
	s := settings{
		transport: os.Getenv("GOCOLL_TRANSPORT"),
		algo:      os.Getenv("GOCOLL_ALGO"),
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
	s.transport = strings.ToLower(strings.TrimSpace(s.transport))
	switch s.transport {
	case "", "auto":
		s.logger.Info("transport chosen", "transport", "tcp", "why", "auto: tcp is the only transport in this build (shm and rdma are not yet available)")
		s.transport = "tcp"
	case "tcp":
	case "shm", "rdma":
		return s, fmt.Errorf("GOCOLL_TRANSPORT=%s: transport not available in this build (available: tcp, auto): %w", s.transport, ErrUnsupported)
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
	if s.tcp.Spin == 0 {
		here := max(cfg.LocalSize, 1)
		s.tcp.Spin = tcp.SpinFor(here)
		c.log.Info("busy-poll budget chosen", "spin", s.tcp.Spin, "ranks_on_host", here, "cpus", runtime.NumCPU())
	}
	if cfg.Serve {
		srv, err := bootstrap.Listen(cfg.Addr, cfg.Token)
		if err != nil {
			// MASTER_ADDR may name this host by an address it cannot bind
			// (a NAT'd or load-balanced name): listen on every interface.
			_, port, _ := net.SplitHostPort(cfg.Addr)
			var err2 error
			if srv, err2 = bootstrap.Listen(":"+port, cfg.Token); err2 != nil {
				return fmt.Errorf("serve rendezvous: %w", err)
			}
		}
		c.server = srv
	}
	if cfg.Size == 1 && cfg.Addr == "" {
		t, err := tcp.Connect(ctx, nil, 0, 1, cfg.Token, s.tcp)
		c.t = t
		return err
	}
	store, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
	if err != nil {
		return err
	}
	c.store = store
	t, err := tcp.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.tcp)
	if err != nil {
		return err
	}
	c.t = t
	return nil
}

// Rank is this process's rank, in [0, Size()).
func (c *Communicator) Rank() int { return c.cfg.Rank }

// Size is the number of ranks in the job.
func (c *Communicator) Size() int { return c.cfg.Size }

// LocalRank is this process's rank among those on its host, or -1 if the
// launcher did not say.
func (c *Communicator) LocalRank() int { return c.cfg.LocalRank }

// Err reports why the communicator is unusable (closed or broken), or nil.
func (c *Communicator) Err() error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	select {
	case c.sem <- struct{}{}:
		err := c.broken
		<-c.sem
		return err
	default:
		return nil // a collective is running, so it was usable when it started
	}
}

// Close leaves the job and releases every resource. Collectives still
// running return ErrClosed. It is safe to call more than once.
func (c *Communicator) Close() error {
	if c == nil {
		return nil
	}
	select {
	case <-c.closed:
		return nil
	default:
	}
	close(c.closed)
	return c.shutdown()
}

func (c *Communicator) shutdown() error {
	var errs []error
	if c.t != nil {
		errs = append(errs, c.t.Close())
	}
	if c.store != nil {
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
func (c *Communicator) run(ctx context.Context, what string, f func() error) error {
	if c == nil {
		return errNil(what)
	}
	select {
	case <-c.closed:
		return fmt.Errorf("comm: %s: %w", what, ErrClosed)
	default:
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("comm: %s: waiting for the previous collective: %w", what, ctx.Err())
	case <-c.closed:
		return fmt.Errorf("comm: %s: %w", what, ErrClosed)
	}
	defer func() { <-c.sem }()
	if c.broken != nil {
		return fmt.Errorf("comm: %s: %w (cause: %w)", what, ErrBroken, c.broken)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("comm: %s: %w", what, err)
	}
	err := f()
	if err == nil {
		return nil
	}
	select {
	case <-c.closed:
		return fmt.Errorf("comm: rank %d: %s: %w", c.cfg.Rank, what, ErrClosed)
	default:
	}
	c.broken = err
	// The ranks are out of step now, and a peer may be waiting for data
	// this rank will never send. Dropping the connections tells every peer
	// at once (their calls fail with ErrPeerLost naming this rank) instead
	// of leaving them to hang until their own deadlines.
	// Close lingers for the peers' goodbyes, which a peer busy computing
	// may not send for a while; this rank's caller need not wait for that.
	go c.t.Close()
	c.log.Info("communicator broken; closing its connections so the peers notice", "rank", c.cfg.Rank, "err", err)
	return fmt.Errorf("comm: rank %d: %w", c.cfg.Rank, err)
}

// Barrier returns once every rank has called it.
func (c *Communicator) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", func() error { return c.g.Barrier(ctx) })
}
