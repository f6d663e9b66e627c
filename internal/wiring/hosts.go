package wiring

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	envset "github.com/gocoll/gocoll/internal/settings"
)

// FakeHost is the fake host of rank in a job of size under
// GOCOLL_FAKE_HOSTS (f): either a number of hosts k, the ranks in
// contiguous blocks (rank r on host r*k/size), or a list of ranks per
// host, host by host ("1,4": rank 0 alone, ranks 1-4 together), which
// must add up to size: an uneven layout.
func FakeHost(f envset.FakeHosts, rank, size int) (int, error) {
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
		return 0, fmt.Errorf("GOCOLL_FAKE_HOSTS lays out %d ranks, but the job has %d: %w", sum, size, collectives.ErrInvalid)
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
func exchangeHosts(ctx context.Context, store *bootstrap.Client, cfg bootstrap.Config, fake int, rdmaErr error) (jobHosts, error) {
	host := hostID()
	machine := machineID()
	if fake >= 0 {
		host = "fake-host-" + strconv.Itoa(fake)
	}
	why := ""
	if rdmaErr != nil {
		why = strings.ReplaceAll(rdmaErr.Error(), "\n", " ")
	}
	if err := store.Put(ctx, hostKey(cfg.Rank), []byte(host+"\n"+why+"\n"+machine+"\n"+CPUList())); err != nil {
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

// HostPrefix starts the store key under which each rank publishes its
// host entry (HostPrefix + its rank).
const HostPrefix = "comm/host/"

func hostKey(r int) string { return HostPrefix + strconv.Itoa(r) }

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
			return nil, fmt.Errorf("host of rank %d: %d fields, want 4 (a rank of another gocoll version?): %w", r, len(f), collectives.ErrInvalid)
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
		m, err := store.Scan(ctx, HostPrefix)
		if err != nil {
			return nil, fmt.Errorf("hosts of the ranks: %w", err)
		}
		for k, v := range m {
			r, err := strconv.Atoi(strings.TrimPrefix(k, HostPrefix))
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
		return jobHosts{}, fmt.Errorf("the job's layout: %s (a rank 0 of another gocoll version?): %w", what, collectives.ErrInvalid)
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
