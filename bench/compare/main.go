package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
)

var (
	errUsage = errors.New("usage")
	// errMissing reports a peer whose tools are not installed.
	errMissing = errors.New("not installed")
)

//go:embed peers/allreduce.c
var allreduceC []byte

//go:embed peers/gloo_allreduce.py
var glooPy []byte

type options struct {
	n               int
	min, max        int64
	iters           int
	transport, path string
	algo            string
	repeat          int
	alternate       bool
	peers           []string
	python          string
	collbench, grun string
	ours, theirs    string
	membw           bool
	save, plot      string
	timeout         time.Duration
	// -hosts mode: hosts network-namespace hosts, layout[i] ranks on
	// host i (filled in rank order), links shaped to rate (rateBps
	// bits/s); nil cl on one host.
	hosts   int
	layout  []int
	rate    string
	rateBps float64
	cl      *cluster
	// -variant: a second gocoll side, variantName, run with variantEnv
	// (GOCOLL_ settings) added.
	variantName string
	variantEnv  []string
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// knownPeers are the -peers names, in the order the tables show them.
var knownPeers = []string{"ompi", "mpich", "gloo"}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 2, "ranks")
	min := fs.String("min", "8", "smallest size in bytes (K/M/G suffixes); sizes double up to -max")
	max := fs.String("max", "64M", "largest size in bytes (K/M/G suffixes)")
	fs.IntVar(&o.iters, "iters", 0, "timed calls per size on every side (0: 200 below 1 MiB, 20 below 16 MiB, else 5)")
	fs.StringVar(&o.transport, "transport", "tcp", "gocoll's transport (collbench -transport)")
	fs.StringVar(&o.path, "mpi", "", "the MPIs' path: tcp (TCP on loopback only) or shm (their default on one host); default: shm for -transport shm, else tcp")
	fs.StringVar(&o.algo, "algo", "", "collbench -algo")
	fs.IntVar(&o.repeat, "repeat", 1, "rounds; each runs every side once and the tables show median [min-max] per size")
	fs.BoolVar(&o.alternate, "alternate", true, "rotate which side runs first from round to round")
	peers := fs.String("peers", strings.Join(knownPeers, ","), "peers to run, comma-separated: ompi (Open MPI), mpich, gloo (PyTorch); empty for gocoll alone")
	fs.StringVar(&o.python, "python", "", "python3 that imports torch (default: $PYTHON, else the first python3 on PATH or /usr/bin/python3 that does)")
	fs.StringVar(&o.collbench, "collbench", "", "collbench binary (default: built from this module)")
	fs.StringVar(&o.grun, "grun", "", "grun binary (default: built from this module)")
	fs.StringVar(&o.ours, "ours", "", "launch template for collbench, run by bash; {np} {collbench} {grun} are replaced and collbench's flags appended (default: {grun} -n {np} {collbench})")
	fs.StringVar(&o.theirs, "theirs", "", "command template for the Open MPI side, run by bash; {np} {min} {max} {iters} {exe} (peers/allreduce.c built with mpicc.openmpi) are replaced")
	fs.BoolVar(&o.membw, "membw", true, "print this machine's single-core memory copy bandwidth, for scale")
	fs.StringVar(&o.save, "save", "", "directory to keep every run's result in, as collbench JSON (collbench plot draws them)")
	fs.StringVar(&o.plot, "plot", "", "draw every side's median with its min-max band into this PNG")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on each side's run in a round; a run cut off counts as a failed round")
	fs.IntVar(&o.hosts, "hosts", 0, "run across this many network-namespace hosts (needs root) joined by links shaped to -rate; 0: all ranks on this host")
	perHost := fs.String("ranks-per-host", "1", "with -hosts: ranks on each host: one number for every host, or one per host, comma-separated (4,1: four on the first host, one on the second; -hosts may then be left out); -n is their sum")
	fs.StringVar(&o.rate, "rate", "1gbit", "with -hosts: each host's link rate in each direction, as tc's tbf takes it (1gbit, 4gbit, 500mbit)")
	variant := fs.String("variant", "", "a second gocoll side, NAME:GOCOLL_X=V[,GOCOLL_Y=W]: the same runs with those settings added (encrypt:GOCOLL_ENCRYPT=1)")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if *variant != "" {
		name, env, ok := strings.Cut(*variant, ":")
		if !ok || name == "" || contains(knownPeers, name) || name == "gocoll" {
			return o, fmt.Errorf("-variant %q: want NAME:GOCOLL_X=V, NAME not gocoll or a peer's: %w", *variant, errUsage)
		}
		for _, kv := range strings.Split(env, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "GOCOLL_") {
				return o, fmt.Errorf("-variant %q: %q is not GOCOLL_X=V: %w", *variant, kv, errUsage)
			}
			o.variantEnv = append(o.variantEnv, kv)
		}
		o.variantName = name
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), errUsage)
	}
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: want at least 1 rank: %w", o.n, errUsage)
	}
	if o.repeat < 1 || o.iters < 0 {
		return o, fmt.Errorf("-repeat %d, -iters %d: want at least 1 round and iters >= 0: %w", o.repeat, o.iters, errUsage)
	}
	var err error
	if o.min, err = parseSize(*min); err != nil {
		return o, fmt.Errorf("-min: %w", err)
	}
	if o.max, err = parseSize(*max); err != nil {
		return o, fmt.Errorf("-max: %w", err)
	}
	// Every side sweeps float32 elements.
	if o.min < 4 || o.min%4 != 0 || o.min > o.max {
		return o, fmt.Errorf("-min %d, -max %d: want 4 <= min <= max, min a multiple of 4: %w", o.min, o.max, errUsage)
	}
	if o.path == "" {
		o.path = "tcp"
		if o.transport == "shm" {
			o.path = "shm"
		}
	}
	if o.path != "tcp" && o.path != "shm" {
		return o, fmt.Errorf("-mpi %q: want tcp or shm: %w", o.path, errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.layout, err = parseLayout(*perHost); err != nil {
		return o, err
	}
	if len(o.layout) > 1 {
		if set["hosts"] && o.hosts != len(o.layout) {
			return o, fmt.Errorf("-hosts %d with -ranks-per-host %s: one number per host, or one for all: %w", o.hosts, *perHost, errUsage)
		}
		o.hosts = len(o.layout)
	}
	if set["ranks-per-host"] && o.hosts == 0 {
		return o, fmt.Errorf("-ranks-per-host %s: one count for every host needs -hosts: %w", *perHost, errUsage)
	}
	if o.hosts < 0 || o.hosts == 1 {
		return o, fmt.Errorf("-hosts %d: want 0 (one host) or at least 2 hosts: %w", o.hosts, errUsage)
	}
	if o.hosts > 0 {
		for len(o.layout) < o.hosts {
			o.layout = append(o.layout, o.layout[0])
		}
		sum := 0
		for _, k := range o.layout {
			sum += k
		}
		if set["n"] && o.n != sum {
			return o, fmt.Errorf("-n %d with -hosts %d -ranks-per-host %s: -n must be the number of ranks they make (%d) or left out: %w", o.n, o.hosts, *perHost, sum, errUsage)
		}
		if o.hosts > 250 {
			return o, fmt.Errorf("-hosts %d: at most 250 (one /24): %w", o.hosts, errUsage)
		}
		if o.path != "tcp" || o.transport == "shm" {
			return o, fmt.Errorf("-hosts: the hosts share no memory: want -transport and -mpi tcp: %w", errUsage)
		}
		if o.ours != "" || o.theirs != "" {
			return o, fmt.Errorf("-hosts launches every side itself: -ours and -theirs do not apply: %w", errUsage)
		}
		o.n = sum
		var err error
		if o.rateBps, err = parseRate(o.rate); err != nil {
			return o, err
		}
	}
	for _, p := range strings.Split(*peers, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !contains(knownPeers, p) {
			return o, fmt.Errorf("-peers: unknown peer %q (want some of %s): %w", p, strings.Join(knownPeers, ","), errUsage)
		}
		if !contains(o.peers, p) {
			o.peers = append(o.peers, p)
		}
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseSize reads bytes with an optional K, M or G suffix (powers of 1024).
func parseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	if u != "" {
		switch u[len(u)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
	}
	if mult > 1 {
		u = u[:len(u)-1]
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size in bytes (examples: 8, 64K, 16M): %w", s, errUsage)
	}
	return n * mult, nil
}

// side is one contender: gocoll or a peer.
type side struct {
	name  string // column heading: gocoll, ompi, mpich, gloo
	label string // in the plot's legend and the header
	about string // how it runs, for the header
	// failed says which rounds failed and how, for the header.
	failed []string
	run    func(ctx context.Context, round int) (report.Result, error)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "gocoll-compare")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if o.hosts > 0 {
		// Ctrl-C or a kill must not leave namespaces and ranks behind:
		// the signal cancels ctx, the running side is killed, and the
		// deferred close removes the namespaces with all inside them.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		fmt.Fprintf(stderr, "compare: building %d namespace hosts, links shaped to %s\n", o.hosts, o.rate)
		if o.cl, err = newCluster(ctx, o.hosts, o.rateBps, o.rate, work); err != nil {
			return err
		}
		defer o.cl.close()
	}
	if o.save != "" {
		if err := os.MkdirAll(o.save, 0o755); err != nil {
			return err
		}
	}
	sides := []side{}
	ours, err := gocollSide(ctx, &o, work, stderr, "gocoll", nil)
	if err != nil {
		return err
	}
	sides = append(sides, ours)
	if o.variantName != "" {
		v, err := gocollSide(ctx, &o, work, stderr, o.variantName, o.variantEnv)
		if err != nil {
			return err
		}
		sides = append(sides, v)
	}
	for _, p := range o.peers {
		var s side
		switch p {
		case "ompi":
			s, err = ompiSide(ctx, o, work)
		case "mpich":
			s, err = mpichSide(ctx, o, work)
		case "gloo":
			s, err = glooSide(ctx, o, work)
		}
		if err != nil {
			return err
		}
		sides = append(sides, s)
	}
	runs := make([][]report.Result, len(sides))
	failed := make([][]string, len(sides))
	for round := 0; round < o.repeat; round++ {
		for k := range sides {
			i := k
			if o.alternate {
				i = (k + round) % len(sides)
			}
			fmt.Fprintf(stderr, "compare: round %d of %d: %s\n", round+1, o.repeat, sides[i].label)
			r, err := sides[i].run(ctx, round)
			if err != nil {
				// One peer's bad round (a hang cut by -timeout, a crash)
				// must not throw away everyone's measurements: report it,
				// and the tables count the rounds each side completed.
				if ctx.Err() != nil {
					return err
				}
				msg, _, _ := strings.Cut(err.Error(), "\n")
				fmt.Fprintf(stderr, "compare: round %d of %d: %s failed: %v\n", round+1, o.repeat, sides[i].label, err)
				failed[i] = append(failed[i], fmt.Sprintf("round %d: %s", round+1, msg))
				continue
			}
			r.Meta.Label = sides[i].label
			if o.save != "" {
				var buf bytes.Buffer
				report.Write(&buf, r)
				if err := os.WriteFile(filepath.Join(o.save, fmt.Sprintf("%s-%d.json", sides[i].name, round+1)), buf.Bytes(), 0o644); err != nil {
					return err
				}
			}
			runs[i] = append(runs[i], r)
		}
	}
	merged := make([]report.Result, len(sides))
	for i := range sides {
		if len(runs[i]) == 0 {
			return fmt.Errorf("%s failed in every round: %s", sides[i].label, failed[i][0])
		}
		merged[i] = report.Merge(runs[i])
		sides[i].failed = failed[i]
	}
	var membw float64
	if o.membw {
		membw = copyBandwidth()
	}
	printTables(stdout, o, sides, merged, membw)
	if o.plot != "" {
		labels := make([]string, len(sides))
		for i, s := range sides {
			labels[i] = s.label
		}
		if err := report.Plot(o.plot, merged, labels); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "compare: wrote %s\n", o.plot)
	}
	return nil
}

// gocollSide builds collbench and grun unless given (into o, for the
// next side), and runs collbench under grun (or the -ours template), with
// env added to the ranks' environment.
func gocollSide(ctx context.Context, o *options, work string, stderr io.Writer, name string, env []string) (side, error) {
	needGrun := o.ours == "" || strings.Contains(o.ours, "{grun}")
	if o.collbench == "" || (needGrun && o.grun == "") {
		root, err := moduleRoot()
		if err != nil {
			return side{}, err
		}
		fmt.Fprintf(stderr, "compare: building collbench and grun from %s\n", root)
		if o.collbench == "" {
			o.collbench = filepath.Join(work, "collbench")
			if err := goBuild(ctx, root, o.collbench, "github.com/gocoll/gocoll/bench"); err != nil {
				return side{}, err
			}
		}
		if needGrun && o.grun == "" {
			o.grun = filepath.Join(work, "grun")
			if err := goBuild(ctx, root, o.grun, "github.com/gocoll/gocoll/cmd/grun"); err != nil {
				return side{}, err
			}
		}
	}
	flags := []string{"-op", "allreduce", "-dtype", "float32", "-redop", "sum",
		"-min", strconv.FormatInt(o.min, 10), "-max", strconv.FormatInt(o.max, 10),
		"-transport", o.transport, "-format", "json"}
	if o.iters > 0 {
		flags = append(flags, "-iters", strconv.Itoa(o.iters))
	}
	if o.algo != "" {
		flags = append(flags, "-algo", o.algo)
	}
	s := side{name: name, label: strings.TrimSpace(fmt.Sprintf("gocoll %s %s", o.transport, strings.Join(env, " "))),
		about: strings.TrimSpace(fmt.Sprintf("collbench under grun, transport %s %s", o.transport, strings.Join(env, " ")))}
	if o.ours != "" {
		s.about = "collbench launched by -ours"
	}
	// Ranks on remote hosts get only what grun -x exports, as mpirun's
	// get only its -x: pass the caller's GOCOLL_* on, as a local run
	// inherits them.
	var exports []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOCOLL_") && !strings.HasPrefix(kv, "GOCOLL_IFACE=") {
			exports = append(exports, "-x", kv)
		}
	}
	for _, kv := range env {
		exports = append(exports, "-x", kv)
	}
	if o.cl != nil {
		s.about = fmt.Sprintf("collbench under grun %s-H %s --rsh (ip netns exec) --bind-to none, transport %s", strings.Join(slices.Concat(exports, []string{""}), " "), o.cl.hostList(o.layout), o.transport)
	}
	s.run = func(ctx context.Context, _ int) (report.Result, error) {
		var out []byte
		var err error
		if o.cl != nil {
			name, args := o.cl.inLauncher(o.grun, slices.Concat(exports, []string{"-H", o.cl.hostList(o.layout), "--rsh", o.cl.rsh,
				"--bind-to", "none", o.collbench}, flags)...)
			out, err = command(ctx, o.timeout, []string{"GOCOLL_IFACE="}, name, args...)
		} else if o.ours == "" {
			out, err = command(ctx, o.timeout, env, o.grun, append([]string{"-n", strconv.Itoa(o.n), o.collbench}, flags...)...)
		} else {
			line := fill(o.ours, map[string]string{"np": strconv.Itoa(o.n), "collbench": o.collbench, "grun": o.grun})
			for _, f := range flags {
				line += " " + shellQuote(f)
			}
			out, err = command(ctx, o.timeout, env, "bash", "-c", line)
		}
		if err != nil {
			return report.Result{}, err
		}
		start := bytes.IndexByte(out, '{')
		if start < 0 {
			return report.Result{}, fmt.Errorf("collbench printed no JSON:\n%s", out)
		}
		return report.Decode(bytes.NewReader(out[start:]))
	}
	return s, nil
}

// mpiBuild compiles peers/allreduce.c with the given MPI's own wrapper,
// named explicitly, so that whichever MPI the mpicc alternative points at
// is never measured under the other's name.
func mpiBuild(ctx context.Context, work, mpicc, exe, pkgs string) error {
	if _, err := exec.LookPath(mpicc); err != nil {
		return fmt.Errorf("%s: %w (apt-get install %s, or leave it out of -peers)", mpicc, errMissing, pkgs)
	}
	src := filepath.Join(work, "allreduce.c")
	if err := os.WriteFile(src, allreduceC, 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-o", exe, src).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w (is %s installed?)\n%s", mpicc, err, pkgs, out)
	}
	return nil
}

func ompiSide(ctx context.Context, o options, work string) (side, error) {
	exe := filepath.Join(work, "allreduce.openmpi")
	if err := mpiBuild(ctx, work, "mpicc.openmpi", exe, "openmpi-bin libopenmpi-dev"); err != nil {
		return side{}, fmt.Errorf("Open MPI: %w", err)
	}
	// Root is what CI runs as; more ranks than cores is this comparison's
	// 4-ranks-on-2-cores case.
	env := []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_rmaps_base_oversubscribe=1"}
	args := []string{"-np", strconv.Itoa(o.n)}
	about := "mpirun.openmpi, its default single-host path (shared memory)"
	if o.path == "tcp" {
		args = append([]string{"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "pml", "ob1"}, args...)
		about = "mpirun.openmpi --mca btl self,tcp --mca btl_tcp_if_include lo --mca pml ob1"
	}
	if o.cl != nil {
		// Every rank on its own host, reached through the rsh agent
		// (no tree spawn: only the launcher namespace has the script's
		// view of the hosts), TCP on the namespaces' subnet for both the
		// runtime and the data. Unbound: each host's one core 0 would be
		// every host's core 0 here.
		hf := filepath.Join(work, "hostfile")
		if err := o.cl.hostfile(hf, o.layout); err != nil {
			return side{}, err
		}
		args = []string{"--hostfile", hf, "-np", strconv.Itoa(o.n), "--bind-to", "none",
			"--mca", "plm_rsh_agent", o.cl.rsh, "--mca", "plm_rsh_no_tree_spawn", "1",
			"--mca", "btl", "self,tcp", "--mca", "pml", "ob1",
			"--mca", "btl_tcp_if_include", o.cl.subnet, "--mca", "oob_tcp_if_include", o.cl.subnet}
		about = "mpirun.openmpi --hostfile (" + o.cl.hostList(o.layout) + ") --bind-to none --mca plm_rsh_agent (ip netns exec) --mca btl self,tcp --mca pml ob1 --mca btl_tcp_if_include " + o.cl.subnet + " --mca oob_tcp_if_include " + o.cl.subnet
	}
	if v := firstLine(ctx, "mpirun.openmpi", "--version"); v != "" {
		about += "; " + v
	}
	tail := []string{exe, strconv.FormatInt(o.min, 10), strconv.FormatInt(o.max, 10), strconv.Itoa(o.iters)}
	s := side{name: "ompi", label: "Open MPI " + o.path, about: about}
	if o.theirs != "" {
		s.about = "-theirs template"
	}
	s.run = func(ctx context.Context, _ int) (report.Result, error) {
		var out []byte
		var err error
		if o.theirs != "" {
			line := fill(o.theirs, map[string]string{"np": strconv.Itoa(o.n), "exe": shellQuote(exe), "min": tail[1], "max": tail[2], "iters": tail[3]})
			out, err = command(ctx, o.timeout, env, "bash", "-c", line)
		} else if o.cl != nil {
			name, a := o.cl.inLauncher("mpirun.openmpi", append(args, tail...)...)
			out, err = command(ctx, o.timeout, env, name, a...)
		} else {
			out, err = command(ctx, o.timeout, env, "mpirun.openmpi", append(args, tail...)...)
		}
		if err != nil {
			return report.Result{}, err
		}
		return parsePeer(out, "Open MPI", o)
	}
	return s, nil
}

func mpichSide(ctx context.Context, o options, work string) (side, error) {
	exe := filepath.Join(work, "allreduce.mpich")
	if err := mpiBuild(ctx, work, "mpicc.mpich", exe, "mpich libmpich-dev"); err != nil {
		return side{}, fmt.Errorf("MPICH: %w", err)
	}
	var env []string
	about := "mpiexec.mpich, its default single-host path (ch4 POSIX shared memory)"
	if o.path == "tcp" {
		// NOLOCAL makes every rank look remote, so no shared-memory module
		// or node-aware collective is used; Debian's MPICH talks through
		// UCX, which would still pick its own shared memory unless held to
		// TCP on loopback.
		env = []string{"MPIR_CVAR_NOLOCAL=1", "UCX_TLS=self,tcp", "UCX_NET_DEVICES=lo"}
		about = "mpiexec.mpich with MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=lo"
	}
	if v := firstLine(ctx, "mpichversion"); v != "" {
		about += "; " + strings.Join(strings.Fields(v), " ")
	}
	// Hydra leaves ranks unbound, where Open MPI binds each to a core (for
	// up to 2 ranks) and grun does whenever they fit: bind MPICH's too,
	// or its ranks, which poll without yielding, wander between cores.
	args := []string{"-n", strconv.Itoa(o.n)}
	if o.cl != nil {
		// Hydra's proxies started through the rsh agent in each host's
		// namespace, calling back to mpiexec at the bridge's address; UCX
		// held to TCP on each host's eth0; unbound, as the other sides.
		env = []string{"MPIR_CVAR_NOLOCAL=1", "UCX_TLS=self,tcp", "UCX_NET_DEVICES=eth0"}
		args = []string{"-launcher", "rsh", "-launcher-exec", o.cl.rsh, "-localhost", o.cl.launchIP,
			"-hosts", o.cl.hostList(o.layout), "-n", strconv.Itoa(o.n)}
		about = "mpiexec.mpich -launcher rsh -launcher-exec (ip netns exec) -hosts " + o.cl.hostList(o.layout) +
			" with MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=eth0, unbound"
		if v := firstLine(ctx, "mpichversion"); v != "" {
			about += "; " + strings.Join(strings.Fields(v), " ")
		}
	} else if o.n <= runtime.NumCPU() {
		args = append(args, "-bind-to", "core")
		about += ", -bind-to core"
	}
	s := side{name: "mpich", label: "MPICH " + o.path, about: about}
	s.run = func(ctx context.Context, _ int) (report.Result, error) {
		name, a := "mpiexec.mpich", append(args, exe,
			strconv.FormatInt(o.min, 10), strconv.FormatInt(o.max, 10), strconv.Itoa(o.iters))
		if o.cl != nil {
			name, a = o.cl.inLauncher(name, a...)
		}
		out, err := command(ctx, o.timeout, env, name, a...)
		if err != nil {
			return report.Result{}, err
		}
		return parsePeer(out, "MPICH", o)
	}
	return s, nil
}

// findPython returns a python3 that imports torch.distributed with gloo.
// A pyenv shim often shadows Debian's python3, which is the one
// python3-torch installs into; hence every candidate is tried.
func findPython(ctx context.Context, given string) (string, error) {
	cands := []string{given}
	if given == "" {
		cands = []string{os.Getenv("PYTHON")}
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			cands = append(cands, filepath.Join(dir, "python3"))
		}
		cands = append(cands, "/usr/bin/python3")
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := exec.CommandContext(ctx, c, "-c", "import torch.distributed as d; assert d.is_gloo_available()").Run()
		cancel()
		if err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("gloo: no python3 imports torch.distributed with gloo: %w (apt-get install python3-torch, pass -python, or leave gloo out of -peers)", errMissing)
}

func glooSide(ctx context.Context, o options, work string) (side, error) {
	py, err := findPython(ctx, o.python)
	if err != nil {
		return side{}, err
	}
	script := filepath.Join(work, "gloo_allreduce.py")
	if err := os.WriteFile(script, glooPy, 0o644); err != nil {
		return side{}, err
	}
	ver := firstLine(ctx, py, "-c", "import torch; print(torch.__version__)")
	// torch's gloo allreduce with no algorithm chosen is gloo's ring
	// (reduce-scatter, then allgather); this gloo has no shared-memory
	// transport, so on one host it always runs over loopback TCP.
	s := side{name: "gloo", label: "gloo tcp", about: fmt.Sprintf("torch %s ProcessGroupGloo (ring allreduce) over TCP on lo, %s", ver, py)}
	if o.cl != nil {
		s.about = fmt.Sprintf("torch %s ProcessGroupGloo (ring allreduce), ranks in the hosts' namespaces in rank order (%s per host), MASTER_ADDR=%s (TCPStore) GLOO_SOCKET_IFNAME=eth0, %s",
			ver, layoutString(o.layout), o.cl.hosts[0], py)
	}
	s.run = func(ctx context.Context, round int) (report.Result, error) {
		store := filepath.Join(work, fmt.Sprintf("store-%d", round))
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, o.n)
		var out0 bytes.Buffer
		for r := 0; r < o.n; r++ {
			name, args := py, []string{script, strconv.Itoa(r), strconv.Itoa(o.n), store,
				strconv.FormatInt(o.min, 10), strconv.FormatInt(o.max, 10), strconv.Itoa(o.iters)}
			env := []string{"GLOO_SOCKET_IFNAME=lo", "OMP_NUM_THREADS=1"}
			if o.cl != nil {
				// As torchrun's env:// does it: rank 0's host serves the
				// store, every rank is told where; a new port per round.
				args[3] = "env://"
				name, args = "ip", append([]string{"netns", "exec", o.cl.ns[hostOf(o.layout, r)], py}, args...)
				env = []string{"GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1", "MASTER_ADDR=" + o.cl.hosts[0],
					"MASTER_PORT=" + strconv.Itoa(29500+round)}
			}
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if r == 0 {
				cmd.Stdout = &out0
			}
			if err := cmd.Start(); err != nil {
				cancel()
				wg.Wait()
				return report.Result{}, err
			}
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				if err := cmd.Wait(); err != nil {
					errs[r] = fmt.Errorf("rank %d: %w\n%s", r, err, lastLines(stderr.String(), 5))
					cancel() // one rank gone: the others would wait for it forever
				}
			}(r)
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return report.Result{}, err
		}
		return parsePeer(out0.Bytes(), "gloo", o)
	}
	return s, nil
}

// parsePeer reads a peer program's lines (bytes count time_us wrong),
// skipping whatever else its launcher printed.
func parsePeer(out []byte, tool string, o options) (report.Result, error) {
	host, _ := os.Hostname()
	cores, model := report.Machine()
	res := report.Result{Meta: report.Meta{Tool: tool, Date: time.Now().UTC().Format(time.RFC3339), Host: host,
		Cores: cores, CPUModel: model, Ranks: o.n, Op: "allreduce", DType: "float32", Redop: "sum", Root: -1,
		Transport: o.path, Algo: "auto", Iters: o.iters, Warmup: 3, Check: true}}
	if tool == "gloo" {
		res.Meta.Transport = "tcp"
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			continue
		}
		size, err1 := strconv.ParseInt(f[0], 10, 64)
		count, err2 := strconv.ParseInt(f[1], 10, 64)
		us, err3 := strconv.ParseFloat(f[2], 64)
		wrong, err4 := strconv.ParseInt(f[3], 10, 64)
		if errors.Join(err1, err2, err3, err4) != nil {
			continue
		}
		res.Rows = append(res.Rows, withBW(report.Row{Size: size, Count: count, Type: "float32", Redop: "sum", Root: -1,
			TimeUS: us, Wrong: wrong, Algo: "auto", Iters: o.iters}, o.n))
	}
	if len(res.Rows) == 0 {
		return res, fmt.Errorf("%s printed no rows of bytes count time_us wrong:\n%s", tool, out)
	}
	return res, nil
}

// withBW sets r's bandwidths from its time: algbw is size/time, busbw
// scales it by allreduce's 2(n-1)/n, as collbench does.
func withBW(r report.Row, n int) report.Row {
	r.AlgBW, r.BusBW = 0, 0
	if r.TimeUS > 0 && n > 0 {
		r.AlgBW = float64(r.Size) / r.TimeUS / 1e3
		r.BusBW = r.AlgBW * 2 * float64(n-1) / float64(n)
	}
	return r
}

// copyBandwidth is one core's memory copy rate in GB/s, the best of a few
// copies of 64 MiB: the ceiling for any transport that copies through
// memory.
func copyBandwidth() float64 {
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	best := time.Duration(math.MaxInt64)
	for i := 0; i < 5; i++ {
		t := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t))
	}
	return float64(len(src)) / best.Seconds() / 1e9
}

func fill(tmpl string, vals map[string]string) string {
	for k, v := range vals {
		tmpl = strings.ReplaceAll(tmpl, "{"+k+"}", v)
	}
	return tmpl
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// command runs name with env added and returns its stdout; a failure
// carries the end of its stderr.
func command(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w\n%s", name, err, lastLines(string(out)+stderr.String(), 10))
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// firstLine is the first line cmd prints, or "" if it fails.
func firstLine(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(l)
}

func goBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module (run compare inside the checkout's bench module, or pass -collbench and -grun): %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a module: run compare from the checkout's bench directory, or pass -collbench and -grun")
	}
	return filepath.Dir(mod), nil
}
