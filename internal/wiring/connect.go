// Package wiring is how the ranks of a job find out where each runs and
// which transport joins them: it exchanges host identities through the
// rendezvous store (one rank gathers them into the job's layout, which
// the others read), judges whether the ranks of a machine are crowded
// onto fewer CPUs than they are, picks the transport (shared memory
// inside a host, RDMA or TCP between hosts, both at once as a
// shm.Hybrid) and builds it. Package comm calls Connect once, at Init;
// everything it needs comes in Options and bootstrap.Config, and what it
// builds comes back in a Wired. A process joining a running elastic job
// links over TCP alone, built by ConnectJoiner with the same token.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/sentinel"
	envset "github.com/gocoll/gocoll/internal/settings"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/rdma"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// Options is what the job asked of its transport, from the environment
// and comm's options.
type Options struct {
	// Transport is "auto", "tcp", "shm" or "rdma".
	Transport string
	TCP       tcp.Options
	// TCPWarm (GOCOLL_TCP_CONNECT=warm) links the first partners at Init.
	TCPWarm bool
	SHM     shm.Options
	RDMA    rdma.Options
	// FakeHosts spreads the ranks over that many hosts, in contiguous
	// blocks, whatever the machine; FakeEnv is GOCOLL_FAKE_HOSTS, used
	// when FakeHosts is 0.
	FakeHosts int
	FakeEnv   envset.FakeHosts
	// Elastic leaves room for replacements that join later (see GrowSpare).
	Elastic bool
}

// Wired is what Connect built. The caller owns Transport and LinkStore
// (the network transports' own store connection, nil if none was
// needed) and closes both, the transport first.
type Wired struct {
	Transport transport.Transport
	Hosts     []int  // each rank's host, for the host-aware algorithms
	Name      string // "tcp", "shm", "shm+tcp", ...
	LinkStore *bootstrap.Client
	// Spare is how many replacements the TCP side admits (GrowSpare), 0
	// where nobody can join.
	Spare int
}

// GrowSpare is how many replacements an elastic job of size ranks
// admits over its life: the job ranks size .. size+GrowSpare-1.
func GrowSpare(size int) int { return size + 64 }

// builder carries one Connect's state.
type builder struct {
	cfg bootstrap.Config
	// token is what every link authenticates with (linkToken).
	token []byte
	log   *slog.Logger
	links *bootstrap.Client
	spare int
}

// Connect picks and builds the transport of rank cfg.Rank: shared memory
// when every rank is on this host, the network otherwise, and both (a
// Hybrid) when several hosts each hold several ranks. store is the
// rank's connection to the rendezvous store; log says what was chosen
// and why. On error nothing Connect opened is left open.
func Connect(ctx context.Context, store *bootstrap.Client, cfg bootstrap.Config, s Options, log *slog.Logger) (Wired, error) {
	w := &builder{cfg: cfg, token: linkToken(store), log: log}
	t, hosts, name, err := w.connect(ctx, store, s)
	if err != nil {
		if w.links != nil {
			w.links.Close()
		}
		return Wired{}, err
	}
	return Wired{Transport: t, Hosts: hosts, Name: name, LinkStore: w.links, Spare: w.spare}, nil
}

func (w *builder) connect(ctx context.Context, store *bootstrap.Client, s Options) (transport.Transport, []int, string, error) {
	cfg := w.cfg
	fake := -1
	if s.FakeHosts > 0 {
		fake = cfg.Rank * s.FakeHosts / cfg.Size
	} else if f := s.FakeEnv; f.Hosts > 0 || len(f.PerHost) > 0 {
		var err error
		if fake, err = FakeHost(f, cfg.Rank, cfg.Size); err != nil {
			return nil, nil, "", err
		}
	}
	// Only auto needs to know whether RDMA would work; a forced rdma
	// finds out in Connect, with the whole error.
	rdmaErr := errors.New("not asked (GOCOLL_TRANSPORT=" + s.Transport + ")")
	if s.Transport == "auto" {
		_, rdmaErr = rdma.Probe(s.RDMA)
	}
	j, err := exchangeHosts(ctx, store, cfg, fake, rdmaErr)
	if err != nil {
		return nil, nil, "", err
	}
	hosts, names, noRDMA := j.hosts, j.names, j.noRDMA
	// Each transport derives its busy-poll budget and yielding from this.
	crowded := j.ranksHere > j.cpusHere
	s.TCP.Crowded = s.TCP.Crowded || crowded
	s.RDMA.Crowded = s.RDMA.Crowded || crowded
	s.SHM.Crowded = s.SHM.Crowded || crowded
	w.log.Info("crowding judged", "crowded", crowded, "ranks_on_machine", j.ranksHere, "cpus_they_share", j.cpusHere,
		"this_rank_cpus", runtime.NumCPU(), "spin_shm", mesh.Spin(s.SHM.Spin, s.SHM.Crowded), "spin_tcp", mesh.Spin(s.TCP.Spin, false),
		"shm_nontemporal", s.SHM.NonTemporal.Here())
	// The network between hosts: RDMA when every rank has a usable device.
	network := "rdma"
	switch {
	case noRDMA != "":
		network = "tcp"
	case s.TCP.Encrypt:
		// Only TCP links are sealed: with GOCOLL_ENCRYPT=1 the network
		// is TCP, even where RDMA would run.
		network, noRDMA = "tcp", "GOCOLL_ENCRYPT=1 seals TCP links only"
	}
	var local []int
	for r, h := range hosts {
		if h == hosts[cfg.Rank] {
			local = append(local, r)
		}
	}
	name := s.Transport
	noSHM := shm.Probe() // nil on Linux; elsewhere shared memory is not built
	switch {
	case name == "shm" && len(names) > 1:
		other := 0
		for other < cfg.Size && hosts[other] == hosts[cfg.Rank] {
			other++
		}
		return nil, nil, "", fmt.Errorf("GOCOLL_TRANSPORT=shm needs every rank on one host, but the job spans %d hosts (rank %d is on %s, rank %d on %s): %w",
			len(names), cfg.Rank, names[hosts[cfg.Rank]], other, names[hosts[other]], collectives.ErrInvalid)
	case name == "auto" && noSHM != nil:
		name = network
		w.log.Info("transport chosen", "transport", name, "why", "auto: no shared memory on this system ("+noSHM.Error()+")",
			"hosts", len(names), "no_rdma", noRDMA)
	case name == "auto" && len(names) == 1:
		name = "shm"
		w.log.Info("transport chosen", "transport", name, "why", "auto: every rank on this host")
	case name == "auto" && len(local) == 1:
		name = network
		w.log.Info("transport chosen", "transport", name, "why", "auto: no other rank on this host", "hosts", len(names), "no_rdma", noRDMA)
	case name == "auto":
		name = "shm+" + network
		w.log.Info("transport chosen", "transport", name, "why", "auto: shared memory to the ranks on this host, "+network+" to the others",
			"hosts", len(names), "ranks_on_host", len(local), "no_rdma", noRDMA)
	}
	switch name {
	case "shm":
		t, err := shm.Connect(ctx, store, cfg.Rank, cfg.Size, w.token, s.SHM)
		if errors.Is(err, shm.ErrUnsupported) {
			return nil, nil, "", fmt.Errorf("GOCOLL_TRANSPORT=shm: %w: %w", sentinel.Unsupported, err)
		}
		if err != nil || !s.Elastic {
			return t, hosts, name, err
		}
		jt, err := w.joinerSide(ctx, store, t, s)
		return jt, hosts, name, err
	case "shm+tcp", "shm+rdma":
		if name == "shm+tcp" && s.Elastic && !s.TCP.Eager {
			// Room for replacements, which link over TCP to the
			// ranks of every host (see Grow).
			s.TCP.Spare = GrowSpare(cfg.Size)
			w.spare = s.TCP.Spare
		}
		far, err := w.connectNetwork(ctx, store, strings.TrimPrefix(name, "shm+"), s)
		if err != nil {
			return nil, nil, "", err
		}
		o := s.SHM
		o.Namespace = "host" + strconv.Itoa(hosts[cfg.Rank]) + "/" + o.Namespace
		me := 0
		for local[me] != cfg.Rank {
			me++
		}
		o.JobRanks = local
		near, err := shm.Connect(ctx, store, me, len(local), w.token, o)
		if err != nil {
			transport.Abort(far, err)
			return nil, nil, "", err
		}
		h, err := shm.NewHybrid(near, local, far)
		if err != nil {
			near.Abort(err)
			transport.Abort(far, err)
			return nil, nil, "", err
		}
		if name == "shm+rdma" && s.Elastic {
			jt, err := w.joinerSide(ctx, store, h, s)
			return jt, hosts, name, err
		}
		return h, hosts, name, nil
	default:
		if name == "tcp" && s.TCPWarm && !s.TCP.Eager && s.TCP.Warm == nil {
			s.TCP.Warm = FirstPartners(cfg.Rank, cfg.Size)
		}
		if name == "tcp" && s.Elastic && !s.TCP.Eager {
			// Room for replacements (see Grow).
			s.TCP.Spare = GrowSpare(cfg.Size)
			w.spare = s.TCP.Spare
		}
		t, err := w.connectNetwork(ctx, store, name, s)
		if err == nil && name == "rdma" && s.Elastic {
			jt, err := w.joinerSide(ctx, store, t, s)
			return jt, hosts, name, err
		}
		return t, hosts, name, err
	}
}

// joinerSide gives t, the transport of every rank of an elastic job
// (shm, rdma or shm+rdma, none of which can link to a process started
// later), a TCP side for the replacements that join it (see Grow): a
// replacement has no shared memory or queue pair with anyone, and
// reaches every member over TCP, linked on demand, while the members
// keep t among themselves. The result routes the job's ranks through t
// and the ranks past its size through TCP (shm.Hybrid); the TCP side
// links nothing until a replacement joins. Eager, a check that the
// ranks reach each other over TCP, means nothing here: it is lazy.
func (w *builder) joinerSide(ctx context.Context, store *bootstrap.Client, t transport.Transport, s Options) (transport.Transport, error) {
	s.TCP.Eager, s.TCP.Warm = false, nil
	s.TCP.Spare = GrowSpare(w.cfg.Size)
	far, err := w.connectNetwork(ctx, store, "tcp", s)
	if err != nil {
		transport.Abort(t, err)
		return nil, err
	}
	all := make([]int, w.cfg.Size)
	for r := range all {
		all[r] = r
	}
	h, err := shm.NewHybrid(t, all, far)
	if err != nil {
		transport.Abort(t, err)
		transport.Abort(far, err)
		return nil, err
	}
	w.spare = s.TCP.Spare
	return h, nil
}

// FirstPartners lists the ranks a rank of a TCP job talks to in its first
// collectives, whose links Init makes all at once (GOCOLL_TCP_CONNECT=warm):
// recursive doubling's partners, those of the small-message allreduce
// that Init itself runs (folding the ranks past the largest power of two
// p onto the first ones), and the ring's two neighbours. The relation is
// symmetric, so both ends of each link want it at once.
func FirstPartners(rank, n int) []int {
	if n < 2 {
		return nil
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	set := map[int]bool{(rank + 1) % n: true, (rank - 1 + n) % n: true}
	if rank >= p {
		set[rank-p] = true
	} else {
		for mask := 1; mask < p; mask <<= 1 {
			set[rank^mask] = true
		}
		if rank+p < n {
			set[rank+p] = true
		}
	}
	delete(set, rank)
	out := make([]int, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// connectNetwork builds the all-to-all mesh over the network: "rdma" or
// "tcp".
func (w *builder) connectNetwork(ctx context.Context, store *bootstrap.Client, name string, s Options) (transport.Transport, error) {
	cfg := w.cfg
	// Both transports fetch addresses as calls need them, for the
	// transport's life, through a store connection of their own: on the
	// communicator's, a request of the watchdog's cut short by its
	// deadline leaves the connection unusable, and a dial behind it would
	// fail for no fault of the peer's. An elastic RDMA job's TCP side
	// shares it.
	if w.links == nil && (name != "rdma" || cfg.Size > 1) {
		links, err := bootstrap.DialJob(ctx, cfg)
		if err != nil {
			return nil, err
		}
		w.links = links
	}
	if name != "rdma" {
		return tcp.Connect(ctx, w.links, cfg.Rank, cfg.Size, w.token, s.TCP)
	}
	if s.TCP.Encrypt {
		return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma with GOCOLL_ENCRYPT=1: RDMA links are not encrypted, only TCP ones (GOCOLL_TRANSPORT=tcp or auto): %w", collectives.ErrInvalid)
	}
	if cfg.Size == 1 {
		// One rank opens no connection, so Connect would not find out
		// there is no device; saying "rdma" then would be a lie.
		if _, err := rdma.Probe(s.RDMA); err != nil {
			return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", sentinel.Unsupported, err)
		}
	}
	t, err := rdma.Connect(ctx, w.links, cfg.Rank, cfg.Size, w.token, s.RDMA)
	if errors.Is(err, rdma.ErrUnavailable) {
		return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", sentinel.Unsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}
