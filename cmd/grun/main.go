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

const usage = `Usage: grun -n N [flags] PROG [ARGS...]

grun starts N copies of PROG on this host, the ranks of one job, and serves
the rendezvous store through which they find each other. It forwards their
output, passes signals on, and stops the whole job as soon as one rank fails.

Flags (-flag and --flag are the same; flags end at PROG or at "--"):
  -n N           number of ranks to start; required, at least 1
  -x VAR=val     set VAR to val in every rank's environment
  -x VAR         copy VAR from grun's environment (an error if it is unset);
                 -x may be repeated
  --tag-output   prefix every output line with "[RANK] "
  --timeout D    stop the job if it runs longer than D, e.g. 90s or 10m
                 (default 0: no limit)
  --grace D      how long ranks have to exit after SIGTERM or a forwarded
                 signal before they get SIGKILL (default 3s)
  --fail-wait D  after a rank fails, how long the others have to notice and
                 exit on their own, reporting their errors, before they get
                 SIGTERM (default 2s; 0: at once, as mpirun does)
  -v, --verbose  print the store address, N and each rank's pid to stderr
  -h, --help     print this help and exit

Environment of each rank: grun's own, then the -x variables, then
  GRUN_RANK        the rank, 0 to N-1
  GRUN_SIZE        N
  GRUN_LOCAL_RANK  the rank among those on this host (= GRUN_RANK)
  GRUN_LOCAL_SIZE  the number of ranks on this host (= N)
  GRUN_ADDR        host:port of the job's rendezvous store
  GRUN_TOKEN       the per-job secret the store demands (never printed)
Standard input of every rank is /dev/null.

Output: each rank's stdout and stderr go to grun's stdout and stderr, a
whole line at a time, so lines of different ranks never mix. A last line
without a newline gets one; lines over 1 MiB are split.

Stopping: each rank runs in a process group of its own, and every signal
grun sends goes to the whole group, so processes a rank started are stopped
with it. SIGINT, SIGTERM and SIGHUP sent to grun are passed on to every
rank. When a rank fails (exits non-zero or is killed by a signal), the
others get --fail-wait to exit on their own (gocoll ranks notice a lost
peer within milliseconds and return an error naming it, which a program may
act on), then SIGTERM. When --timeout expires or grun's output is closed,
they get SIGTERM at once. Ranks still
running --grace later get SIGKILL; a second signal to grun sends SIGKILL at
once. Ranks that exit 0 early are fine: grun waits for all of them, then
stops anything they left behind.

Exit status:
  0        every rank exited 0
  S        the first rank to fail exited with status S
  128+K    the first rank to fail was killed by signal K (137 = SIGKILL)
  124      the job ran longer than --timeout
  129, 130, 143
           grun got SIGHUP, SIGINT or SIGTERM
  141      grun's output was closed, as in "grun ... | head" (SIGPIPE)
  127      PROG could not be started (not found or not executable)
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
	cfg, err := parseArgs(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "grun: %v\nUsage: grun -n N [flags] PROG [ARGS...]; see grun --help\n", err)
		return exitUsage
	}
	// Registered before the first rank starts, so that a Ctrl-C at any
	// point reaches the ranks instead of killing grun behind their backs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	return newJob(cfg, newLocalStarter(), stdout, stderr, os.Environ()).run(ctx, sigs)
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
	fs.Func("n", "number of ranks", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not a whole number")
		}
		cfg.n, cfg.nSet = n, true
		return nil
	})
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
	cfg := config{grace: defaultGrace, failWait: defaultFailWait}
	fs := newFlagSet(&cfg, lookupEnv)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case !cfg.nSet:
		return config{}, errors.New("missing -n N: the number of ranks to start")
	case cfg.n < 1:
		return config{}, fmt.Errorf("-n %d: the number of ranks must be at least 1", cfg.n)
	case fs.NArg() == 0:
		return config{}, errors.New("missing PROG: the program each rank runs")
	}
	cfg.prog, cfg.args = fs.Arg(0), fs.Args()[1:]
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
