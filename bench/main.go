package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain is collbench; it returns the exit status: 0, 1 for a failure
// or wrong results, 2 for bad usage.
func realMain(args []string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "plot" {
		err = plotCmd(args[1:], stderr)
	} else {
		var cfg config
		cfg, err = parseConfig(args, stderr)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err == nil {
			err = runBench(context.Background(), cfg, stdout, stderr)
		}
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		// Every rank finds the same fault in the same flags: one says so.
		if rankFromEnv() == 0 {
			fmt.Fprintln(stderr, "collbench:", strings.TrimSuffix(err.Error(), ": "+errUsage.Error()))
		}
		return 2
	default:
		fmt.Fprintln(stderr, "collbench:", err)
		return 1
	}
}

func runBench(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	opts := []comm.Option{comm.WithTransport(cfg.transport)}
	var traffic *collectives.Traffic
	if cfg.traffic {
		traffic = new(collectives.Traffic)
		opts = append(opts, comm.WithTraffic(traffic))
	}
	if cfg.algo != "" {
		opts = append(opts, comm.WithAlgorithm(cfg.algo))
	}
	c, err := comm.Init(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	dt, _ := dtypeByName(cfg.dtype)
	e := env{ctx: ctx, c: c, cfg: cfg, traffic: traffic}
	if c.Rank() == 0 {
		e.out = newSink(cfg.format, stdout, cfg.traffic)
		tty := isTerminal(stderr)
		if tty || cfg.progress {
			e.progress, e.tty = stderr, tty
		}
	}
	start := time.Now()
	err = dt.run(e)
	if e.out == nil || (err != nil && !errors.Is(err, errWrong)) {
		return err
	}
	meta := metadata(cfg, c.Size(), start)
	meta.Transport = c.Transport() // what auto chose, not only what was asked
	if werr := e.out.end(meta); werr != nil {
		return errors.Join(err, werr)
	}
	if cfg.plot != "" {
		res := report.Result{Meta: meta, Rows: e.out.rows()}
		if perr := report.Plot(cfg.plot, []report.Result{res}, []string{res.Label()}); perr != nil {
			return errors.Join(err, perr)
		}
		fmt.Fprintf(stderr, "collbench: wrote %s\n", cfg.plot)
	}
	return err
}

// rankFromEnv is this process's rank by its launcher's environment, 0
// when there is none or it does not parse (a lone process).
func rankFromEnv() int {
	cfg, err := bootstrap.FromEnv(os.LookupEnv)
	if err != nil {
		return 0
	}
	return cfg.Rank
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func metadata(cfg config, ranks int, start time.Time) report.Meta {
	host, _ := os.Hostname()
	// As in the rows: no redop or root for collectives that take none.
	if spec, ok := findOp(cfg.op); ok {
		if !spec.reduces {
			cfg.redop = "none"
		}
		if !spec.rooted {
			cfg.root = -1
		}
	}
	cores, model := report.Machine()
	return report.Meta{
		Tool: "collbench", Date: start.UTC().Format(time.RFC3339), Host: host,
		Cores: cores, CPUModel: model, CPUs: report.BoundCPUs(), GOMAXPROCS: runtime.GOMAXPROCS(0), Ranks: ranks,
		Op: cfg.op, DType: cfg.dtype, Redop: cfg.redop, Root: cfg.root,
		Transport: cfg.transport, Algo: algoFor(cfg.algo, cfg.op),
		Iters: cfg.iters, Warmup: cfg.warmup, Check: cfg.check,
		GoVersion: runtime.Version(), Version: version(), Args: os.Args[1:], Label: cfg.label,
	}
}

// version is the source the binary was built from: the VCS stamp go build
// leaves in the binary, else git describe of the current directory.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			return rev + dirty
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--tags").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// plotCmd is "collbench plot [-o out.png] a.json [b.json ...]": one line
// per file, labelled from its metadata. Flags may follow the files.
func plotCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("collbench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "collbench.png", "PNG to write")
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return fmt.Errorf("plot: %w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) == 0 {
		return fmt.Errorf("plot: no result files (usage: collbench plot [-o out.png] a.json [b.json ...]): %w", errUsage)
	}
	// Files of the same setup share a label: they are repeated runs, drawn
	// as one line (the median) in a band from the fastest to the slowest,
	// so that a noisy minute does not pass for the setup's behaviour.
	var labels []string
	runs := map[string][]report.Result{}
	for _, f := range files {
		r, err := report.ReadFile(f)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l := r.Label()
		if _, ok := runs[l]; !ok {
			labels = append(labels, l)
		}
		runs[l] = append(runs[l], r)
	}
	results := make([]report.Result, len(labels))
	for i, l := range labels {
		results[i] = report.Merge(runs[l])
		if n := len(runs[l]); n > 1 {
			labels[i] += fmt.Sprintf(" (median of %d runs)", n)
		}
	}
	if err := report.Plot(*out, results, labels); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintf(stderr, "collbench plot: wrote %s (%d line(s) from %d file(s))\n", *out, len(labels), len(files))
	return nil
}
