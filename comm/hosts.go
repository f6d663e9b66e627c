package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/mesh"
	envset "github.com/gocoll/gocoll/internal/settings"
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
// GOCOLL_FAKE_HOSTS (f): either a number of hosts k, the ranks in
// contiguous blocks (rank r on host r*k/size), or a list of ranks per
// host, host by host ("1,4": rank 0 alone, ranks 1-4 together), which
// must add up to size: an uneven layout.
func fakeHost(f envset.FakeHosts, rank, size int) (int, error) {
	if f.Hosts > 0 {
		return rank * f.Hosts / size, nil
	}
	host, sum := -1, 0
	for i, k := range f.PerHost {
		if host < 0 && rank < sum+k {
			host = i
		}
		sum += k
	}
	if sum != size {
		return 0, fmt.Errorf("GOCOLL_FAKE_HOSTS lays out %d ranks, but the job has %d: %w", sum, size, ErrInvalid)
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
// learns everyone's. Deciding from everyone's answers, not each rank
// alone, is what keeps a job whose hosts differ from splitting into ranks
// that wait on different transports, and tells apart ranks that share a
// few cores from ranks bound to a core each (each sees one CPU).
//
// Rank 0 reads every rank's entry and publishes what they add up to (the
// layout), which every other rank reads in one request: n+1 puts and 2n
// gets per job, where every rank reading every entry would take n² gets
// through the one store, the largest part of a big job's start.
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
	if err := store.Put(ctx, hostKey(cfg.Rank), []byte(host+"\n"+why+"\n"+machine+"\n"+cpuList())); err != nil {
		return jobHosts{}, fmt.Errorf("publish host: %w", err)
	}
	var layout []byte
	if cfg.Rank == 0 {
		var err error
		if layout, err = gatherHosts(ctx, store, cfg.Size); err != nil {
			return jobHosts{}, err
		}
		if err := store.Put(ctx, layoutKey, layout); err != nil {
			return jobHosts{}, fmt.Errorf("publish the job's layout: %w", err)
		}
	} else {
		var err error
		if layout, err = store.Get(ctx, layoutKey); err != nil {
			return jobHosts{}, fmt.Errorf("the job's layout (from rank 0): %w", err)
		}
	}
	return readLayout(layout, cfg.Rank, cfg.Size)
}

func hostKey(r int) string { return "comm/host/" + strconv.Itoa(r) }

// layoutKey is where rank 0 publishes the job's layout.
const layoutKey = "comm/layout"

// gatherHosts reads every rank's host entry and encodes the layout, as
// lines: RDMA's verdict ("" if every rank can use it); the number of
// hosts and their names; the number of machines and, for each, its ranks
// and the CPUs they may run on together (-1: some rank did not say); and
// for each rank, its host and machine.
func gatherHosts(ctx context.Context, store *bootstrap.Client, size int) ([]byte, error) {
	type mach struct {
		ranks int
		cpus  map[string]bool
		known bool
	}
	noRDMA := ""
	hostIDs := map[string]int{}
	var hostNames []string
	machIDs := map[string]int{}
	var machs []*mach
	entries, err := allEntries(ctx, store, size)
	if err != nil {
		return nil, err
	}
	perRank := make([]byte, 0, 8*size) // every rank came
	for r, v := range entries {
		f := strings.SplitN(string(v), "\n", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("host of rank %d: %d fields, want 4 (a rank of another gocoll version?): %w", r, len(f), ErrInvalid)
		}
		h, why, theirMachine, theirCPUs := f[0], f[1], f[2], f[3]
		if why != "" && noRDMA == "" {
			noRDMA = fmt.Sprintf("rank %d: %s", r, why)
		}
		hi, ok := hostIDs[h]
		if !ok {
			hi = len(hostNames)
			hostIDs[h] = hi
			hostNames = append(hostNames, h)
		}
		mi, ok := machIDs[theirMachine]
		if !ok {
			mi = len(machs)
			machIDs[theirMachine] = mi
			machs = append(machs, &mach{cpus: map[string]bool{}, known: true})
		}
		m := machs[mi]
		m.ranks++
		if theirCPUs == "" {
			m.known = false
		}
		for _, c := range strings.Split(theirCPUs, ",") {
			m.cpus[c] = true
		}
		perRank = fmt.Appendf(perRank, "%d.%d ", hi, mi)
	}
	var b []byte
	b = fmt.Appendf(b, "%s\n%d\n", noRDMA, len(hostNames))
	for _, h := range hostNames {
		b = fmt.Appendf(b, "%s\n", h)
	}
	b = fmt.Appendf(b, "%d\n", len(machs))
	for _, m := range machs {
		cpus := len(m.cpus)
		if !m.known {
			cpus = -1
		}
		b = fmt.Appendf(b, "%d %d\n", m.ranks, cpus)
	}
	b = append(b, perRank...)
	return b, nil
}

// allEntries returns every rank's host entry. A scan takes what is there,
// a get waits for the first one missing (by when most of the rest have
// come too), and so on: a few requests where a get per rank, one round
// trip after another, made rank 0 the last to finish the exchange. (A
// scan's answer is capped at bootstrap.MaxValue; entries it leaves out
// are simply fetched by get.)
//
// Until every rank has come, the work and memory go by the ranks that came,
// not by the job's size: a huge WORLD_SIZE that nobody fills costs little,
// and the context's deadline (GOCOLL_TIMEOUT) ends the wait on time.
func allEntries(ctx context.Context, store *bootstrap.Client, size int) ([][]byte, error) {
	got := map[int][]byte{}
	next := 0 // no rank below is missing
	for len(got) < size {
		m, err := store.Scan(ctx, "comm/host/")
		if err != nil {
			return nil, fmt.Errorf("hosts of the ranks: %w", err)
		}
		for k, v := range m {
			r, err := strconv.Atoi(strings.TrimPrefix(k, "comm/host/"))
			if err == nil && r >= next && r < size && got[r] == nil {
				got[r] = v
			}
		}
		for next < size && got[next] != nil {
			next++
		}
		if len(got) == size {
			break
		}
		v, err := store.Get(ctx, hostKey(next))
		if err != nil {
			return nil, fmt.Errorf("host of rank %d: %w", next, err)
		}
		got[next] = v
	}
	entries := make([][]byte, size)
	for r, v := range got {
		entries[r] = v
	}
	return entries, nil
}

// readLayout decodes gatherHosts' layout as rank sees it.
func readLayout(b []byte, rank, size int) (jobHosts, error) {
	bad := func(what string) (jobHosts, error) {
		return jobHosts{}, fmt.Errorf("the job's layout: %s (a rank 0 of another gocoll version?): %w", what, ErrInvalid)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 {
		return bad("too short")
	}
	j := jobHosts{noRDMA: lines[0], hosts: make([]int, size)}
	nh, err := strconv.Atoi(lines[1])
	if err != nil || nh < 1 || len(lines) < 2+nh+2 {
		return bad("host count")
	}
	j.names = lines[2 : 2+nh]
	nm, err := strconv.Atoi(lines[2+nh])
	if err != nil || nm < 1 || len(lines) != 2+nh+1+nm+1 {
		return bad("machine count")
	}
	type mach struct{ ranks, cpus int }
	machs := make([]mach, nm)
	for i := range machs {
		if _, err := fmt.Sscanf(lines[3+nh+i], "%d %d", &machs[i].ranks, &machs[i].cpus); err != nil {
			return bad("machine " + strconv.Itoa(i))
		}
	}
	ranks := strings.Fields(lines[len(lines)-1])
	if len(ranks) != size {
		return bad(fmt.Sprintf("%d ranks, want %d", len(ranks), size))
	}
	for r, f := range ranks {
		hs, ms, ok := strings.Cut(f, ".")
		h, herr := strconv.Atoi(hs)
		m, merr := strconv.Atoi(ms)
		if !ok || herr != nil || merr != nil || h < 0 || h >= nh || m < 0 || m >= nm {
			return bad("rank " + strconv.Itoa(r))
		}
		j.hosts[r] = h
		if r == rank {
			j.ranksHere, j.cpusHere = machs[m].ranks, machs[m].cpus
		}
	}
	if j.cpusHere < 0 {
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
	} else if f := s.fakeEnv; f.Hosts > 0 || len(f.PerHost) > 0 {
		var err error
		if fake, err = fakeHost(f, cfg.Rank, cfg.Size); err != nil {
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
		"this_rank_cpus", runtime.NumCPU(), "spin_shm", mesh.Spin(s.shm.Spin, s.shm.Crowded), "spin_tcp", mesh.Spin(s.tcp.Spin, false))
	// The network between hosts: RDMA when every rank has a usable device.
	network := "rdma"
	switch {
	case noRDMA != "":
		network = "tcp"
	case s.tcp.Encrypt:
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
		if err != nil || !s.elastic {
			return t, hosts, name, err
		}
		jt, err := c.joinerSide(ctx, store, t, s)
		return jt, hosts, name, err
	case "shm+tcp", "shm+rdma":
		if name == "shm+tcp" && s.elastic && !s.tcp.Eager {
			// Room for replacements, which link over TCP to the
			// ranks of every host (see Grow).
			s.tcp.Spare = growSpare(cfg.Size)
			c.ext.spare = s.tcp.Spare
		}
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
		if name == "shm+rdma" && s.elastic {
			jt, err := c.joinerSide(ctx, store, h, s)
			return jt, hosts, name, err
		}
		return h, hosts, name, nil
	default:
		if name == "tcp" && s.tcpWarm && !s.tcp.Eager && s.tcp.Warm == nil {
			s.tcp.Warm = firstPartners(cfg.Rank, cfg.Size)
		}
		if name == "tcp" && s.elastic && !s.tcp.Eager {
			// Room for replacements (see Grow).
			s.tcp.Spare = growSpare(cfg.Size)
			c.ext.spare = s.tcp.Spare
		}
		t, err := c.connectNetwork(ctx, store, name, s)
		if err == nil && name == "rdma" && s.elastic {
			jt, err := c.joinerSide(ctx, store, t, s)
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
func (c *Communicator) joinerSide(ctx context.Context, store *bootstrap.Client, t transport.Transport, s settings) (transport.Transport, error) {
	s.tcp.Eager, s.tcp.Warm = false, nil
	s.tcp.Spare = growSpare(c.cfg.Size)
	far, err := c.connectNetwork(ctx, store, "tcp", s)
	if err != nil {
		transport.Abort(t, err)
		return nil, err
	}
	all := make([]int, c.cfg.Size)
	for r := range all {
		all[r] = r
	}
	h, err := shm.NewHybrid(t, all, far)
	if err != nil {
		transport.Abort(t, err)
		transport.Abort(far, err)
		return nil, err
	}
	c.ext.spare = s.tcp.Spare
	return h, nil
}

// firstPartners lists the ranks a rank of a TCP job talks to in its first
// collectives, whose links Init makes all at once (GOCOLL_TCP_CONNECT=warm):
// recursive doubling's partners, those of the small-message allreduce
// that Init itself runs (folding the ranks past the largest power of two
// p onto the first ones), and the ring's two neighbours. The relation is
// symmetric, so both ends of each link want it at once.
func firstPartners(rank, n int) []int {
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
func (c *Communicator) connectNetwork(ctx context.Context, store *bootstrap.Client, name string, s settings) (transport.Transport, error) {
	cfg := c.cfg
	// Both transports fetch addresses as calls need them, for the
	// transport's life, through a store connection of their own: on the
	// communicator's, a request of the watchdog's cut short by its
	// deadline leaves the connection unusable, and a dial behind it would
	// fail for no fault of the peer's. An elastic RDMA job's TCP side
	// shares it.
	if c.linkStore == nil && (name != "rdma" || cfg.Size > 1) {
		links, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
		if err != nil {
			return nil, err
		}
		c.linkStore = links
	}
	if name != "rdma" {
		return tcp.Connect(ctx, c.linkStore, cfg.Rank, cfg.Size, cfg.Token, s.tcp)
	}
	if s.tcp.Encrypt {
		return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma with GOCOLL_ENCRYPT=1: RDMA links are not encrypted, only TCP ones (GOCOLL_TRANSPORT=tcp or auto): %w", ErrInvalid)
	}
	if cfg.Size == 1 {
		// One rank opens no connection, so Connect would not find out
		// there is no device; saying "rdma" then would be a lie.
		if _, err := rdma.Probe(s.rdma); err != nil {
			return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", ErrUnsupported, err)
		}
	}
	t, err := rdma.Connect(ctx, c.linkStore, cfg.Rank, cfg.Size, cfg.Token, s.rdma)
	if errors.Is(err, rdma.ErrUnavailable) {
		return nil, fmt.Errorf("GOCOLL_TRANSPORT=rdma: %w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}
