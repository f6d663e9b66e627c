package comm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
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

// hostID names the host this process runs on, as far as shared memory is
// concerned: its hostname, the kernel's boot id (two VMs that happen to
// share a hostname are not one host) and its network namespace. The last
// because the shm transport finds its peers through abstract Unix
// sockets, which each network namespace has its own set of: two
// containers on one kernel, or the namespaces the multi-host tests use as
// hosts, must talk over the network.
func hostID() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	netns, _ := os.Readlink("/proc/self/ns/net")
	return name + "/" + strings.TrimSpace(string(boot)) + "/" + netns
}

// exchangeHosts publishes this rank's host and reads everyone's, returning
// each rank's host as a small integer (numbered by first appearance) and
// the host names.
func exchangeHosts(ctx context.Context, store *bootstrap.Client, cfg Config, fake int) ([]int, []string, error) {
	mine := hostID()
	if fake > 0 {
		mine = "fake-host-" + strconv.Itoa(cfg.Rank*fake/cfg.Size)
	}
	key := func(r int) string { return "comm/host/" + strconv.Itoa(r) }
	if err := store.Put(ctx, key(cfg.Rank), []byte(mine)); err != nil {
		return nil, nil, fmt.Errorf("publish host: %w", err)
	}
	hosts := make([]int, cfg.Size)
	var names []string
	ids := make(map[string]int)
	for r := range hosts {
		v, err := store.Get(ctx, key(r))
		if err != nil {
			return nil, nil, fmt.Errorf("host of rank %d: %w", r, err)
		}
		id, ok := ids[string(v)]
		if !ok {
			id = len(names)
			ids[string(v)] = id
			names = append(names, string(v))
		}
		hosts[r] = id
	}
	return hosts, names, nil
}

// connectTransport picks and builds the transport: shared memory when
// every rank is on this host, the network otherwise, and both (a Hybrid)
// when several hosts each hold several ranks. It returns the transport,
// each rank's host, and the transport's name.
func (c *Communicator) connectTransport(ctx context.Context, store *bootstrap.Client, s settings) (transport.Transport, []int, string, error) {
	cfg := c.cfg
	fake := s.fakeHosts
	if v := strings.TrimSpace(os.Getenv("GOCOLL_FAKE_HOSTS")); v != "" && fake == 0 {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			return nil, nil, "", fmt.Errorf("GOCOLL_FAKE_HOSTS=%q: want a positive number of hosts: %w", v, ErrInvalid)
		}
		fake = k
	}
	hosts, names, err := exchangeHosts(ctx, store, cfg, fake)
	if err != nil {
		return nil, nil, "", err
	}
	var local []int
	for r, h := range hosts {
		if h == hosts[cfg.Rank] {
			local = append(local, r)
		}
	}
	name := s.transport
	switch {
	case name == "shm" && len(names) > 1:
		other := 0
		for other < cfg.Size && hosts[other] == hosts[cfg.Rank] {
			other++
		}
		return nil, nil, "", fmt.Errorf("GOCOLL_TRANSPORT=shm needs every rank on one host, but the job spans %d hosts (rank %d is on %s, rank %d on %s): %w",
			len(names), cfg.Rank, names[hosts[cfg.Rank]], other, names[hosts[other]], ErrInvalid)
	case name == "auto" && len(names) == 1:
		name = "shm"
		c.log.Info("transport chosen", "transport", name, "why", "auto: every rank on this host")
	case name == "auto" && len(local) == 1:
		name = "tcp"
		c.log.Info("transport chosen", "transport", name, "why", "auto: no other rank on this host", "hosts", len(names))
	case name == "auto":
		name = "shm+tcp"
		c.log.Info("transport chosen", "transport", name, "why", "auto: shared memory to the ranks on this host, tcp to the others",
			"hosts", len(names), "ranks_on_host", len(local))
	}
	if s.shm.Spin == 0 && name != "tcp" {
		s.shm.Spin = shm.SpinFor(len(local))
		c.log.Info("shm busy-poll budget chosen", "spin", s.shm.Spin, "ranks_on_host", len(local), "cpus", runtime.NumCPU())
	}
	switch name {
	case "shm":
		t, err := shm.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.shm)
		return t, hosts, name, err
	case "shm+tcp":
		far, err := tcp.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.tcp)
		if err != nil {
			return nil, nil, "", err
		}
		o := s.shm
		o.Namespace = "host" + strconv.Itoa(hosts[cfg.Rank]) + "/" + o.Namespace
		me := 0
		for local[me] != cfg.Rank {
			me++
		}
		near, err := shm.Connect(ctx, store, me, len(local), cfg.Token, o)
		if err != nil {
			far.Abort(err)
			return nil, nil, "", err
		}
		h, err := shm.NewHybrid(near, local, far)
		if err != nil {
			near.Abort(err)
			far.Abort(err)
			return nil, nil, "", err
		}
		return h, hosts, name, nil
	default:
		t, err := tcp.Connect(ctx, store, cfg.Rank, cfg.Size, cfg.Token, s.tcp)
		return t, hosts, name, err
	}
}
