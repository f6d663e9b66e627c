//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const usage = `Usage: grun [-n N] [flags] PROG [ARGS...]
       grun --join JOBFILE [-x VAR[=val]]... [-v] PROG [ARGS...]

grun starts N copies of PROG, the ranks of one job, on this host or on the
hosts of a host list, and serves the rendezvous store through which they
find each other. It forwards their output, passes signals on, and stops the
whole job as soon as one rank fails.

Flags (-flag and --flag are the same; flags end at PROG or at "--"):
  -n N, --np N   number of ranks to start; required without a host list,
                 with one it defaults to the number of slots
  -x VAR=val     set VAR to val in every rank's environment
  -x VAR         copy VAR from grun's environment (an error if it is unset);
                 -x may be repeated
  --tag-output   prefix every output line with "[RANK] "
  --output-dir DIR
                 write each rank's stdout and stderr lines to DIR/rank-R.log
                 (created; the files are truncated) instead of grun's output
  --timeout D    stop the job if it runs longer than D, e.g. 90s or 10m
                 (default 0: no limit)
  --grace D      how long ranks have to exit after SIGTERM or a forwarded
                 signal before they get SIGKILL (default 3s)
  --bind-to core|none|auto
                 core: bind each rank started on this host to a CPU of its
                 own (from the CPUs grun may use; more ranks here than CPUs
                 is then an error); none: leave them to the scheduler; auto
                 (default): core when 2 or more ranks run here and they fit,
                 else none. Remote ranks are not bound.
  --fail-wait D  after a rank fails, how long the others have to notice and
                 exit on their own, reporting their errors, before they get
                 SIGTERM (default 2s; 0: at once, as mpirun does)
  --elastic MIN  an elastic job: a rank that fails does not stop the others
                 while at least MIN ranks live; grun sets GOCOLL_ELASTIC=1
                 in every rank, whose survivors go on with Communicator.Shrink
                 (see "Elastic jobs" in docs/operations.md). Below MIN, the
                 job stops as without the flag
  --elastic MIN:MAX
                 as --elastic MIN, and when a rank fails while fewer than
                 MAX live, start a replacement with the failed rank's
                 environment (at most MAX replacements over the job's
                 life); its Init waits until the running ranks admit it
                 with Communicator.Grow, and links to every rank over
                 TCP, whatever transport the ranks use among themselves
                 (see "Elastic jobs" in docs/operations.md). -n may be
                 below MAX: the job starts with N ranks and grows as ranks join
                 (--job-file, --join)
  --job-file FILE
                 with --elastic MIN:MAX: open a join port beside the
                 rendezvous store and write FILE (mode 0600: it holds the
                 job's secret token; removed when grun exits) with what
                 "grun --join FILE PROG" needs to add a rank to the
                 running job, from this host or another that reaches
                 grun's address (without -H, give --iface for that: an
                 all-local job's store is on 127.0.0.1 otherwise)
  --join FILE    join the running job of the grun that wrote job file
                 FILE (its --job-file) with one rank running PROG, here:
                 that grun gives the rank its number and environment
                 (GRUN_*, its -x variables, GOCOLL_ELASTIC=1; this grun's
                 -x on top), prints its output (prefixed with its rank
                 under --tag-output) and counts its exit as any rank's;
                 PROG's Init waits until the running ranks admit it with
                 Communicator.Grow. The job refuses it while MAX ranks
                 live, or once it is ending: grun --join then prints
                 "the job refused this process: ..." and exits 3. Its
                 connection to the job's grun is the rank's lifeline:
                 if it drops, PROG gets SIGTERM, then SIGKILL. Exits as
                 PROG did. Only -x and -v go with --join
  -v, --verbose  print the store address, the hosts and each rank's pid to
                 stderr
  -h, --help     print this help and exit

Hosts (default: every rank on this host):
  -H, --host host1:4,host2:4
                 run on these hosts, with this many slots (ranks) each; a
                 host without :K has 1 slot; IPv6 as [fd00::1]:4
  --hostfile FILE
                 the hosts from FILE: one per line, "host slots=K" or just
                 "host" (1 slot); '#' starts a comment
  --map-by slot  fill each host's slots before the next host's (default)
  --map-by node  place ranks round-robin over the hosts
  --rsh CMD      run remote ranks with "CMD HOST COMMAND" (default ssh);
                 CMD is split at spaces, as in --rsh "ssh -p 2222"
  --iface NAME   the other hosts dial the rendezvous store at NAME's
                 address (default: $GOCOLL_IFACE, else the address this host
                 uses to reach them; GOCOLL_DEBUG=info logs the choice)
Without -H or --hostfile, inside a Slurm allocation (SLURM_JOB_NODELIST set)
the hosts are the allocation's nodes, with SLURM_TASKS_PER_NODE slots each.
More ranks than slots is an error.

Hosts named localhost, a loopback address or this host's name run their
ranks as grun's children; every other host runs them through rsh as one
shell command (run by the login shell, which must be a POSIX sh, bash, ksh
or zsh): cd to grun's working directory, then run PROG, found through the
remote PATH unless it is a path, with the -x variables and GRUN_* (the
token goes over rsh's stdin, never on a command line). So PROG and the
directory must exist on every host, at the same path: a shared file
system, or copied beforehand. Remote ranks do not get grun's environment,
only -x's. rsh's stdin is the rank's lifeline: grun passes signals along it
(SIGINT and SIGQUIT arrive as SIGTERM: the remote shell starts the rank with
those two ignored), and when it closes (grun exits or dies, the connection
drops) the rank and everything it started are killed.

Environment of each rank: grun's own (local ranks only), then the -x
variables, then
  GRUN_RANK        the rank, 0 to N-1
  GRUN_SIZE        N
  GRUN_LOCAL_RANK  the rank among those on its host
  GRUN_LOCAL_SIZE  the number of ranks on its host
  GRUN_ADDR        host:port of the job's rendezvous store (127.0.0.1 when
                   every rank is local)
  GRUN_TOKEN       the per-job secret the store demands (never printed)
Standard input of every rank is /dev/null.

Output: each rank's stdout and stderr go to grun's stdout and stderr, a
whole line at a time, so lines of different ranks never mix. A last line
without a newline gets one; lines over 1 MiB are split.

Stopping: each rank runs in a process group of its own, and every signal
grun sends goes to the whole group, so processes a rank started are stopped
with it. SIGINT, SIGTERM and SIGHUP sent to grun are passed on to every
rank. When a rank fails (exits non-zero or is killed by a signal, or its rsh
connection is lost), the others get --fail-wait to exit on their own
(gocoll ranks notice a lost peer within milliseconds and return an error
naming it, which a program may act on), then SIGTERM. When --timeout
expires or grun's output is closed, they get SIGTERM at once. Ranks still
running --grace later get SIGKILL; a second signal to grun sends SIGKILL at
once. Ranks that exit 0 early are fine: grun waits for all of them, then
stops anything they left behind. A remote rank that exits with status
128+K is reported as killed by signal K (sh reports both alike).

Stall reports: SIGQUIT to grun (kill -QUIT, from another terminal) asks
every rank what it is doing and prints which ranks wait in the oldest
unfinished call and what the others last did, and writes it with their
goroutine stacks to ./grun-stall-PID-K.txt; a call that waits GOCOLL_STALL
(60s) asks for the same. The job goes on.

Traces: with GOCOLL_TRACE=FILE each rank writes its calls to FILE ("%r" in
it replaced by the rank, else ".RANK" appended);
  grun --merge-trace [-o trace.json] FILE...
merges them into one Chrome trace-event file (bench/timeline draws it).

Exit status:
  0        every rank exited 0 (with --elastic: every rank that did not
           fail, and at least MIN of them)
  S        the first rank to fail exited with status S
  128+K    the first rank to fail was killed by signal K (137 = SIGKILL)
  124      the job ran longer than --timeout
  129, 130, 143
           grun got SIGHUP, SIGINT or SIGTERM
  141      grun's output was closed, as in "grun ... | head" (SIGPIPE)
  127      PROG could not be started (not found or not executable)
  3        grun --join: the job refused the rank (MAX ranks live, or the
           job is ending)
  2        bad usage
  1        grun itself failed (could not start the rendezvous store)
`

const (
	defaultGrace    = 3 * time.Second
	defaultFailWait = 2 * time.Second
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], dupStd(os.Stdout), dupStd(os.Stderr)))
}

// dupStd returns a duplicate of stdout or stderr to write to. A write to a
// closed pipe on descriptor 1 or 2 kills a Go program with SIGPIPE on the
// spot ("grun ... | head"), which would leave the ranks' children running;
// through the duplicate grun gets EPIPE instead, and stops the job. The
// duplicate is close-on-exec so ranks do not inherit it.
func dupStd(f *os.File) *os.File {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return f
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name())
}

// run is grun with its arguments (without the program name) and output
// streams, returning the exit status. Cancelling ctx stops the job as
// SIGTERM would.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--merge-trace" || args[0] == "-merge-trace") {
		return mergeTrace(args[1:], stdout, stderr)
	}
	cfg, err := parseArgs(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "grun: %v\nUsage: grun [-n N] [flags] PROG [ARGS...]; see grun --help\n", err)
		return exitUsage
	}
	// Registered before the first rank starts, so that a Ctrl-C at any
	// point reaches the ranks instead of killing grun behind their backs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// SIGQUIT asks for the job's stall report (Go's default, a dump of
	// grun's own goroutines, would help nobody).
	quits := make(chan os.Signal, 1)
	signal.Notify(quits, syscall.SIGQUIT)
	defer signal.Stop(quits)
	if cfg.joinFile != "" {
		return runJoin(ctx, cfg, stderr)
	}
	j := newJob(cfg, newStarter(cfg.rsh), stdout, stderr, os.Environ())
	j.quits = quits
	return j.run(ctx, sigs)
}

// newFlagSet defines grun's flags on cfg. -x values are checked, and -x VAR
// looked up through lookupEnv, as they are parsed.
func newFlagSet(cfg *config, lookupEnv func(string) (string, bool)) *flag.FlagSet {
	fs := flag.NewFlagSet("grun", flag.ContinueOnError)
	// Errors are reported by run, in one message with a pointer to --help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	// -n and the durations are Func flags for the sake of their error
	// messages: the flag package says only "parse error".
	ranks := func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not a whole number")
		}
		cfg.n, cfg.nSet = n, true
		return nil
	}
	fs.Func("n", "number of ranks", ranks)
	// mpirun's spelling, which hands type from habit.
	fs.Func("np", "number of ranks (same as -n)", ranks)
	fs.Func("x", "set or copy an environment variable for every rank", func(s string) error {
		kv, err := exportVar(s, lookupEnv)
		if err != nil {
			return err
		}
		cfg.env = append(cfg.env, kv)
		return nil
	})
	fs.BoolVar(&cfg.tag, "tag-output", false, "prefix output lines with [RANK]")
	durationFlag(fs, &cfg.timeout, "timeout", "stop the job after this long")
	durationFlag(fs, &cfg.grace, "grace", "time between SIGTERM and SIGKILL")
	durationFlag(fs, &cfg.failWait, "fail-wait", "time the others have to exit on their own after a rank fails")
	hostList := func(s string) error {
		if cfg.hostsFrom != "" {
			return fmt.Errorf("hosts already given by %s", cfg.hostsFrom)
		}
		hosts, err := parseHostList(s)
		if err != nil {
			return err
		}
		cfg.hosts, cfg.hostsFrom = hosts, "-H"
		return nil
	}
	fs.Func("H", "hosts and slots, host1:4,host2:4", hostList)
	fs.Func("host", "hosts and slots, host1:4,host2:4", hostList)
	fs.Func("hostfile", "file of lines \"host slots=K\"", func(s string) error {
		if cfg.hostsFrom != "" {
			return fmt.Errorf("hosts already given by %s", cfg.hostsFrom)
		}
		data, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		hosts, err := parseHostfile(data, s)
		if err != nil {
			return err
		}
		cfg.hosts, cfg.hostsFrom = hosts, "--hostfile "+s
		return nil
	})
	fs.Func("map-by", "slot (fill each host in turn) or node (round-robin)", func(s string) error {
		switch s {
		case "slot":
			cfg.byNode = false
		case "node":
			cfg.byNode = true
		default:
			return errors.New("want slot or node")
		}
		return nil
	})
	fs.Func("rsh", "command that runs a command on a host (default ssh)", func(s string) error {
		cfg.rsh = strings.Fields(s)
		if len(cfg.rsh) == 0 {
			return errors.New("empty command")
		}
		return nil
	})
	fs.Func("bind-to", "core (one CPU per rank), none, or auto", func(s string) error {
		m, err := parseBindMode(s)
		cfg.bind = m
		return err
	})
	fs.StringVar(&cfg.iface, "iface", "", "interface whose address the other hosts dial")
	fs.Func("output-dir", "write each rank's output to DIR/rank-R.log", func(s string) error {
		if s == "" {
			return errors.New("empty directory name")
		}
		cfg.outputDir = s
		return nil
	})
	fs.Func("elastic", "keep the job going while at least MIN ranks live (MIN:MAX: and start replacements up to MAX)", func(s string) error {
		lo, hi, grow := strings.Cut(s, ":")
		n, err := strconv.Atoi(lo)
		if err != nil || n < 1 {
			return errors.New("want the smallest number of ranks the job may go on with, at least 1 (MIN), or MIN:MAX with MAX the most it grows back to")
		}
		cfg.elastic, cfg.elasticMax = n, 0
		if grow {
			m, err := strconv.Atoi(hi)
			if err != nil || m < n {
				return fmt.Errorf("MIN:MAX %q: want MAX a number of ranks at least MIN", s)
			}
			cfg.elasticMax = m
		}
		return nil
	})
	fs.Func("job-file", "write what grun --join needs to join this job to FILE (mode 0600)", func(s string) error {
		if s == "" {
			return errors.New("empty file name")
		}
		cfg.jobFile = s
		return nil
	})
	fs.Func("join", "join the running job of job file FILE with one rank running PROG", func(s string) error {
		if s == "" {
			return errors.New("empty file name")
		}
		cfg.joinFile = s
		return nil
	})
	fs.BoolVar(&cfg.verbose, "v", false, "verbose")
	fs.BoolVar(&cfg.verbose, "verbose", false, "verbose")
	return fs
}

func durationFlag(fs *flag.FlagSet, dst *time.Duration, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration: want a number and a unit, as in 500ms, 30s or 5m")
		}
		if d < 0 {
			return errors.New("must not be negative")
		}
		*dst = d
		return nil
	})
}

func parseArgs(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	cfg := config{grace: defaultGrace, failWait: defaultFailWait, rsh: []string{"ssh"}}
	fs := newFlagSet(&cfg, lookupEnv)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if cfg.joinFile != "" {
		// The job's grun decides the rest.
		var other []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "join", "x", "v", "verbose":
			default:
				other = append(other, "-"+f.Name)
			}
		})
		switch {
		case len(other) > 0:
			return config{}, fmt.Errorf("--join takes only -x and -v: the job's grun decides %s", strings.Join(other, ", "))
		case fs.NArg() == 0:
			return config{}, errors.New("missing PROG: the program the joining rank runs")
		}
		cfg.prog, cfg.args = fs.Arg(0), fs.Args()[1:]
		return cfg, nil
	}
	if cfg.hostsFrom == "" {
		hosts, ok, err := slurmHosts(lookupEnv)
		if err != nil {
			return config{}, fmt.Errorf("in a Slurm allocation: %w", err)
		}
		if ok {
			cfg.hosts, cfg.hostsFrom = hosts, "the Slurm allocation"
		}
	}
	if cfg.iface != "" {
		cfg.ifaceFrom = "--iface"
	} else if v, ok := lookupEnv("GOCOLL_IFACE"); ok && strings.TrimSpace(v) != "" {
		cfg.iface, cfg.ifaceFrom = strings.TrimSpace(v), "GOCOLL_IFACE"
	}
	if !cfg.nSet && cfg.hostsFrom != "" {
		// As mpirun: one rank per slot.
		for _, h := range cfg.hosts {
			cfg.n += h.slots
		}
		cfg.nSet = true
	}
	switch {
	case !cfg.nSet:
		return config{}, errors.New("missing -n N: the number of ranks to start")
	case cfg.n < 1:
		return config{}, fmt.Errorf("-n %d: the number of ranks must be at least 1", cfg.n)
	case fs.NArg() == 0:
		return config{}, errors.New("missing PROG: the program each rank runs")
	case cfg.elastic > cfg.n:
		return config{}, fmt.Errorf("--elastic %d: more than the %d ranks started", cfg.elastic, cfg.n)
	case cfg.elasticMax > 0 && cfg.elasticMax < cfg.n:
		return config{}, fmt.Errorf("--elastic %d:%d: MAX is less than the %d ranks started", cfg.elastic, cfg.elasticMax, cfg.n)
	case cfg.jobFile != "" && cfg.elasticMax == 0:
		return config{}, errors.New("--job-file needs --elastic MIN:MAX: only an elastic job with room to grow takes ranks that join it")
	}
	cfg.prog, cfg.args = fs.Arg(0), fs.Args()[1:]
	if cfg.hostsFrom != "" {
		p, err := place(cfg.hosts, cfg.n, cfg.byNode)
		if err != nil {
			return config{}, fmt.Errorf("%s: %w", cfg.hostsFrom, err)
		}
		cfg.placement = p
	}
	return cfg, nil
}

// exportVar turns a -x argument into "VAR=val".
func exportVar(s string, lookupEnv func(string) (string, bool)) (string, error) {
	name, val, hasVal := strings.Cut(s, "=")
	switch {
	case name == "":
		return "", errors.New("want VAR=value or VAR, got an empty variable name")
	case strings.ContainsAny(name, "\x00 \t\n"):
		return "", fmt.Errorf("%q is not a variable name", name)
	case strings.IndexByte(val, 0) >= 0:
		return "", fmt.Errorf("the value of %s contains a NUL byte", name)
	}
	switch name {
	case "GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE", "GRUN_ADDR", "GRUN_TOKEN":
		// Overriding these would break the job, not configure it.
		return "", fmt.Errorf("%s is set by grun itself", name)
	}
	if !hasVal {
		v, ok := lookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%s is not set in grun's environment (use -x %s=value to set it)", name, name)
		}
		val = v
	}
	return name + "=" + val, nil
}
