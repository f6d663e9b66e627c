//go:build unix

// Command scale measures what a job's size costs at start: for each rank
// count, the slowest rank's Init, the slowest first allreduce after it, and
// per rank the open descriptors and resident memory once connected, and
// the requests the job's ranks sent the rendezvous store (from Init to
// the first allreduce's end, all ranks together).
//
//	cd bench && go build -o scale ./scale && go build -o grun github.com/gocoll/gocoll/cmd/grun
//	./scale -grun ./grun -n 8,16,32,64          # processes started by grun
//	./scale -local -n 64,128,256                 # goroutine ranks in one process (comm.NewLocal)
//	./scale -local -n 1024 -cpuprofile cpu.out   # and where that process spends its time
//	./scale -local -procs 4 -n 2048,4096         # goroutine ranks spread over 4 processes
//
// A process holds both ends of every link and store connection among its
// own ranks, about 18 descriptors a rank at 1024, and a process may not
// open more than its hard RLIMIT_NOFILE (20 000 in some sandboxes, which
// root cannot raise there). -procs spreads the goroutine ranks over
// several processes, contiguous blocks of ranks each, against one store
// in this process, so each gets a limit of its own.
//
// It prints a table, a row per rank count. A job that fails (descriptors
// run out, Init times out) gets a row saying so, and the sweep goes on.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
)

// sample is one rank's figures.
type sample struct {
	Rank  int           `json:"rank"`
	Init  time.Duration `json:"init_ns"`
	First time.Duration `json:"first_ns"`
	FDs   int           `json:"fds"`
	RSS   int64         `json:"rss_kib"`
	Reqs  int64         `json:"store_requests"`
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	counts := fs.String("n", "8,16,32,64", "rank counts, comma-separated")
	grun := fs.String("grun", "grun", "the grun to start process ranks with")
	local := fs.Bool("local", false, "goroutine ranks in this process (comm.NewLocal) instead of processes")
	procs := fs.Int("procs", 1, "with -local: spread the goroutine ranks over this many processes, each with its own descriptor limit")
	block := fs.String("block", "", "internal: run ranks `first:count` of a job of -n ranks whose store is -addr")
	addr := fs.String("addr", "", "internal: the store of a -block process")
	transport := fs.String("transport", "tcp", "GOCOLL_TRANSPORT of the ranks")
	child := fs.Bool("child", false, "internal: be one rank of a process job")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound of each job")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile to `file` (with -local: the ranks')")
	blockProfile := fs.String("blockprofile", "", "write this process's block profile to `file`")
	mutexProfile := fs.String("mutexprofile", "", "write this process's mutex profile to `file`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *child {
		return childRank(*transport, stdout)
	}
	if *block != "" {
		return blockRanks(*block, *counts, *addr, *transport, *timeout, stdout, stderr)
	}
	if *procs < 1 || (*procs > 1 && !*local) {
		fmt.Fprintf(stderr, "scale: -procs %d: want at least 1, and more than 1 only with -local\n", *procs)
		return 2
	}
	var ns []int
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "scale: -n %q: want rank counts such as 8,16,32\n", *counts)
			return 2
		}
		ns = append(ns, n)
	}
	raiseFDLimit()
	stop, err := startProfiles(*cpuProfile, *blockProfile, *mutexProfile)
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintln(stderr, "scale:", err)
		}
	}()
	mode := "processes (grun)"
	if *local {
		mode = "goroutines in one process (comm.NewLocal)"
		if *procs > 1 {
			mode = fmt.Sprintf("goroutines in %d processes (comm.New), one store", *procs)
		}
	}
	fmt.Fprintf(stdout, "scale: %s, GOCOLL_TRANSPORT=%s, %s\n", mode, *transport, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(stdout, "%7s %12s %14s %10s %10s %12s %12s %12s\n", "ranks", "init(max)", "1st ar(max)", "fds(med)", "fds(max)", "rss KiB(med)", "store reqs", "wall")
	for _, n := range ns {
		start := time.Now()
		var ss []sample
		var err error
		switch {
		case *local && *procs > 1:
			ss, err = spreadJob(n, *procs, *transport, *timeout)
		case *local:
			ss, err = localJob(n, *transport, *timeout)
		default:
			ss, err = processJob(*grun, n, *transport, *timeout)
		}
		wall := time.Since(start)
		if err != nil {
			fmt.Fprintf(stdout, "%7d failed after %v: %v\n", n, wall.Round(time.Millisecond), err)
			continue
		}
		fmt.Fprintln(stdout, row(n, ss, wall))
	}
	return 0
}

// startProfiles starts the profiles asked for; stop writes them.
func startProfiles(cpu, block, mutex string) (stop func() error, err error) {
	var cpuFile *os.File
	if cpu != "" {
		if cpuFile, err = os.Create(cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, err
		}
	}
	if block != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	if mutex != "" {
		runtime.SetMutexProfileFraction(10)
	}
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		for _, p := range []struct{ name, file string }{{"block", block}, {"mutex", mutex}} {
			if p.file == "" {
				continue
			}
			f, err := os.Create(p.file)
			if err == nil {
				err = pprof.Lookup(p.name).WriteTo(f, 0)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}, nil
}

func row(n int, ss []sample, wall time.Duration) string {
	var inits, firsts []time.Duration
	var fds []int
	var rss []int64
	var reqs int64
	for _, s := range ss {
		inits, firsts, fds, rss = append(inits, s.Init), append(firsts, s.First), append(fds, s.FDs), append(rss, s.RSS)
		reqs += s.Reqs
	}
	slices.Sort(fds)
	slices.Sort(rss)
	return fmt.Sprintf("%7d %12v %14v %10d %10d %12d %12d %12v", n, slices.Max(inits).Round(10*time.Microsecond),
		slices.Max(firsts).Round(time.Microsecond), fds[len(fds)/2], fds[len(fds)-1], rss[len(rss)/2], reqs, wall.Round(time.Millisecond))
}

// processJob runs n ranks of this program under grun and reads each
// rank's sample from its output.
func processJob(grun string, n int, transport string, timeout time.Duration) ([]sample, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, grun, "-n", strconv.Itoa(n), "--bind-to", "none", self, "-child", "-transport", transport)
	cmd.Env = append(os.Environ(), "GOCOLL_TRANSPORT="+transport)
	out, err := cmd.CombinedOutput()
	ss := readSamples(strings.NewReader(string(out)))
	if err != nil || len(ss) != n {
		return nil, fmt.Errorf("%d of %d ranks reported (%v): %s", len(ss), n, err, lastLines(string(out), 3))
	}
	return ss, nil
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, " | ")
}

// childRank is one rank of a process job: it times Init and a first
// 8-byte allreduce, and reports its descriptors and memory once
// connected.
func childRank(transport string, stdout io.Writer) int {
	ctx := context.Background()
	t0 := time.Now()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	defer c.Close()
	s := sample{Rank: c.Rank(), Init: time.Since(t0)}
	t1 := time.Now()
	if err := comm.AllReduce(ctx, c, []float32{1, 2}, comm.Sum); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	s.First = time.Since(t1)
	s.FDs = openFDs()
	s.RSS = rssKiB()
	s.Reqs = bootstrap.Requests()
	// Every rank measured before any closes: closing ranks would free
	// descriptors the others count.
	if err := c.Barrier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	b, _ := json.Marshal(s)
	fmt.Fprintf(stdout, "scale-sample %s\n", b)
	return 0
}

// localJob runs n goroutine ranks in this process; descriptors and
// memory are the process's, divided among the ranks.
func localJob(n int, transport string, timeout time.Duration) ([]sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fds0, rss0, reqs0 := openFDs(), rssKiB(), bootstrap.Requests()
	t0 := time.Now()
	cs, err := comm.NewLocal(ctx, n, comm.WithTransport(transport))
	if err != nil {
		return nil, err
	}
	init := time.Since(t0)
	defer func() {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	}()
	ss := make([]sample, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t1 := time.Now()
			errs[i] = comm.AllReduce(ctx, c, []float32{1, 2}, comm.Sum)
			ss[i] = sample{Rank: i, Init: init, First: time.Since(t1)}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	fds, rss := (openFDs()-fds0)/n, (rssKiB()-rss0)/int64(n)
	for i := range ss {
		ss[i].FDs, ss[i].RSS = fds, rss
	}
	// The job's requests, all in this process, counted once.
	ss[0].Reqs = bootstrap.Requests() - reqs0
	return ss, nil
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return -1
}

// above is n in the type of an Rlimit field (uint64 on Linux, int64 on
// FreeBSD), and whether it is above limit. n fits either: it was parsed
// to 63 bits.
func above[T int64 | uint64](limit T, n uint64) (T, bool) { return T(n), T(n) > limit }

// raiseFDLimit lifts the descriptor limit as far as it may go: the hard
// limit too when the process may (root may, up to fs.nr_open), else the
// soft limit to the hard one. A job of n ranks in one process holds both
// ends of every link and of every store connection: about 2n·(log₂n + 5)
// descriptors with links made on demand, n² with a full mesh.
func raiseFDLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 63); err == nil {
			if max, more := above(l.Max, n); more && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: max, Max: max}) == nil {
				return
			}
		}
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
