package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/rdma"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// WithSHMOptions tunes the shared-memory transport (slot count and size).
func WithSHMOptions(o shm.Options) Option { return func(s *settings) { s.shm = o } }

// WithFakeHosts makes the job believe its ranks are spread over k hosts,
// in contiguous blocks (rank r on host r*k/size), whatever the machine
// they really run on: with it one machine tests what several hosts do
// (shared memory inside a "host", the network between them, hierarchical
// collectives). GOCOLL_FAKE_HOSTS=k does the same. For tests only.
func WithFakeHosts(k int) Option { return func(s *settings) { s.fakeHosts = k } }

// fakeHost is the fake host of rank in a job of size under
// GOCOLL_FAKE_HOSTS=v: either a number of hosts k, the ranks in contiguous
// blocks (rank r on host r*k/size), or a list of ranks per host, host by
// host ("1,4": rank 0 alone, ranks 1-4 together), which must add up to
// size: an uneven layout.
func fakeHost(v string, rank, size int) (int, error) {
	if !strings.Contains(v, ",") {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			return 0, fmt.Errorf("GOCOLL_FAKE_HOSTS=%q: want a number of hosts or a list of ranks per host (1,4): %w", v, ErrInvalid)
		}
		return rank * k / size, nil
	}
	host, sum := -1, 0
	for i, f := range strings.Split(v, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return 0, fmt.Errorf("GOCOLL_FAKE_HOSTS=%q: host %d: want a positive number of ranks: %w", v, i, ErrInvalid)
		}
		if host < 0 && rank < sum+k {
			host = i
		}
		sum += k
	}
	if sum != size {
		return 0, fmt.Errorf("GOCOLL_FAKE_HOSTS=%q lays out %d ranks, but the job has %d: %w", v, sum, size, ErrInvalid)
	}
	return host, nil
}

// hostID names the host this process runs on, as far as shared memory is
// concerned: its hostname, the kernel's boot id (two VMs that happen to
// share a hostname are not one host) and its network namespace. The last
// because the shm transport finds its peers through abstract Unix
// sockets, which each network namespace has its own set of: two
// containers on one kernel, or the namespaces the multi-host tests use as
// hosts, must talk over the network.
func hostID() string {
	name, _ := os.Hostname()
	netns, _ := os.Readlink("/proc/self/ns/net")
	return name + "/" + bootID() + "/" + netns
}

// bootID is the running kernel's boot id, or "" if it cannot be read.
func bootID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot))
}

// machineID names the kernel this process runs on, whose CPUs every
// process on it shares, whatever its network namespace or container:
// the boot id, else the hostname.
func machineID() string {
	if boot := bootID(); boot != "" {
		return boot
	}
	name, _ := os.Hostname()
	return name
}

// jobHosts is what the ranks told each other of where they run.
type jobHosts struct {
	hosts  []int    // each rank's host, numbered by first appearance
	names  []string // the hosts
	noRDMA string   // the first rank's reason RDMA cannot serve the job ("" if it can)
	// The ranks on this machine (one kernel, whatever their hosts for
	// shared memory, fake or network namespaces) and the CPUs they may run
	// on together: whether they are crowded.
	ranksHere, cpusHere int
}

// exchangeHosts publishes this rank's host, RDMA verdict and CPUs, and
// reads everyone's. Deciding from everyone's answers, not each rank
// alone, is what keeps a job whose hosts differ from splitting into ranks
// that wait on different transports, and tells apart ranks that share a
// few cores from ranks bound to a core each (each sees one CPU).
//
// fake, if not negative, is this rank's fake host (GOCOLL_FAKE_HOSTS).
func exchangeHosts(ctx context.Context, store *bootstrap.Client, cfg Config, fake int, rdmaErr error) (jobHosts, error) {
	host := hostID()
	machine := machineID()
	if fake >= 0 {
		host = "fake-host-" + strconv.Itoa(fake)
	}
	why := ""
	if rdmaErr != nil {
		why = strings.ReplaceAll(rdmaErr.Error(), "\n", " ")
	}
	key := func(r int) string { return "comm/host/" + strconv.Itoa(r) }
	if err := store.Put(ctx, key(cfg.Rank), []byte(host+"\n"+why+"\n"+machine+"\n"+cpuList())); err != nil {
		return jobHosts{}, fmt.Errorf("publish host: %w", err)
	}
	j := jobHosts{hosts: make([]int, cfg.Size)}
	ids := make(map[string]int)
	cpus := make(map[string]bool)
	cpusKnown := true
	for r := range j.hosts {
		v, err := store.Get(ctx, key(r))
		if err != nil {
			return jobHosts{}, fmt.Errorf("host of rank %d: %w", r, err)
		}
		f := strings.SplitN(string(v), "\n", 4)
		if len(f) != 4 {
			return jobHosts{}, fmt.Errorf("host of rank %d: %d fields, want 4 (a rank of another gocoll version?): %w", r, len(f), ErrInvalid)
		}
		h, why, theirMachine, theirCPUs := f[0], f[1], f[2], f[3]
		if why != "" && j.noRDMA == "" {
			j.noRDMA = fmt.Sprintf("rank %d: %s", r, why)
		}
		id, ok := ids[h]
		if !ok {
			id = len(j.names)
			ids[h] = id
			j.names = append(j.names, h)
		}
		j.hosts[r] = id
		if theirMachine == machine {
			j.ranksHere++
			if theirCPUs == "" {
				cpusKnown = false
			}
			for _, c := range strings.Split(theirCPUs, ",") {
				cpus[c] = true
			}
		}
	}
	j.cpusHere = len(cpus)
	if !cpusKnown {
		j.cpusHere = runtime.NumCPU()
	}
	return j, nil
}

// connectTransport picks and builds the transport: shared memory when
// every rank is on this host, the network otherwise, and both (a Hybrid)
// when several hosts each hold several ranks. It returns the transport,
// each rank's host, and the transport's name.
func (c *Communicator) connectTransport(ctx context.Context, store *bootstrap.Client, s settings) (transport.Transport, []int, string, error) {
	cfg := c.cfg
	fake := -1
	if s.fakeHosts > 0 {
		fake = cfg.Rank * s.fakeHosts / cfg.Size
	} else if v := strings.TrimSpace(os.Getenv("GOCOLL_FAKE_HOSTS")); v != "" {
		var err error
		if fake, err = fakeHost(v, cfg.Rank, cfg.Size); err != nil {
			return nil, nil, "", err
		}
	}
	// Only auto needs to know whether RDMA would work; a forced rdma
	// finds out in Connect, with the whole error.
	rdmaErr := errors.New("not asked (GOCOLL_TRANSPORT=" + s.transport + ")")
	if s.transport == "auto" {
		_, rdmaErr = rdma.Probe(s.rdma)
	}
	j, err := exchangeHosts(ctx, store, cfg, fake, rdmaErr)
	if err != nil {
		return nil, nil, "", err
	}
	hosts, names, noRDMA := j.hosts, j.names, j.noRDMA
	// Each transport derives its busy-poll budget and yielding from this.
	crowded := j.ranksHere > j.cpusHere
	s.tcp.Crowded = s.tcp.Crowded || crowded
	s.rdma.Crowded = s.rdma.Crowded || crowded
	s.shm.Crowded = s.shm.Crowded || crowded
	c.log.Info("crowding judged", "crowded", crowded, "ranks_on_machine", j.ranksHere, "cpus_they_share", j.cpusHere,
		"this_rank_cpus", runtime.NumCPU())
	// The network between hosts: RDMA when every rank has a usable device.
	network := "rdma"
	if noRDMA != "" {
		network = "tcp"
	}
	var local []int
	for r, h := range hosts {
		if h == hosts[cfg.Rank] {
			local = append(local, r)
		}
	}
	name := s.transport
	noSHM := shm.Probe() // nil on Linux; elsewhere shared memory is not built
	switch {
	case name == "shm" && len(names) > 1:
		other := 0
		for other < cfg.Size && hosts[other] == hosts[cfg.Rank] {
			other++
		}
		return nil, nil, "", fmt.Errorf("GOCOLL_TRANSPORT=shm needs every rank on one host, but the job spans %d hosts (rank %d is on %s, rank %d on %s): %w",
			len(names), cfg.Rank, names[hosts[cfg.Rank]], other, names[hosts[other]], ErrInvalid)
	case name == "auto" && noSHM != nil:
		name = network
		c.log.Info("transport chosen", "transport", name, "why", "auto: no shared memory on this system ("+noSHM.Error()+")",
			"hosts", len(names), "no_rdma", noRDMA)
	case name == "auto" && len(names) == 1:
		name = "shm"
		c.log.Info("transport chosen", "transport", name, "why", "auto: every rank on this host")
	case name == "auto" && len(local) == 1:
		name = network
		c.log.Info("transport chosen", "transport", name, "why", "auto: no other rank on this host", "hosts", len(names), "no_rdma", noRDMA)
	case name == "auto":
		name = "shm+" + network
		c.log.Info("transport chosen", "transport", name, "why", "auto: shared memory to the ranks on this host, "+network+" to the others",
			"hosts", len(names), "ranks_on_host", len(local), "no_rdma", noRDMA)
	}
	switch name {
	case "shm":
		t, err := shm.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.shm)
		if errors.Is(err, shm.ErrUnsupported) {
			return nil, nil, "", fmt.Errorf("GOCOLL_TRANSPORT=shm: %w: %w", ErrUnsupported, err)
		}
		return t, hosts, name, err
	case "shm+tcp", "shm+rdma":
		far, err := c.connectNetwork(ctx, store, strings.TrimPrefix(name, "shm+"), s)
		if err != nil {
			return nil, nil, "", err
		}
		o := s.shm
		o.Namespace = "host" + strconv.Itoa(hosts[cfg.Rank]) + "/" + o.Namespace
		me := 0
		for local[me] != cfg.Rank {
			me++
		}
		o.JobRanks = local
		near, err := shm.Connect(ctx, store, me, len(local), cfg.Token, o)
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
		return h, hosts, name, nil
	default:
		t, err := c.connectNetwork(ctx, store, name, s)
		return t, hosts, name, err
	}
}

// connectNetwork builds the all-to-all mesh over the network: "rdma" or
// "tcp".
func (c *Communicator) connectNetwork(ctx context.Context, store *bootstrap.Client, name string, s settings) (transport.Transport, error) {
	cfg := c.cfg
	if name != "rdma" {
		return tcp.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.tcp)
	}
	if cfg.Size == 1 {
		// One rank opens no connection, so Connect would not find out
		// there is no device; saying "rdma" then would be a lie.
		if _, err := rdma.Probe(s.rdma); err != nil {
			return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", ErrUnsupported, err)
		}
	}
	t, err := rdma.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.rdma)
	if errors.Is(err, rdma.ErrUnavailable) {
		return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}
