package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
)

var errUsage = errors.New("usage")

type options struct {
	n                  int
	min, max           string
	transport, mpiMode string
	peer               string // openmpi, mpich or gloo
	algo               string
	repeat             int
	alternate          bool
	peers              string
	collbench, grun    string
	ours, theirs       string
	membw              bool
	large              int64
	save, plot         string
	timeout            time.Duration
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

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 2, "ranks")
	fs.StringVar(&o.min, "min", "8", "smallest size in bytes (K/M/G suffixes)")
	fs.StringVar(&o.max, "max", "64M", "largest size in bytes (K/M/G suffixes)")
	fs.StringVar(&o.transport, "transport", "tcp", "gocoll's transport (collbench -transport)")
	fs.StringVar(&o.peer, "peer", "openmpi", "the peer to compare with: openmpi, mpich or gloo (PyTorch's gloo backend)")
	fs.StringVar(&o.mpiMode, "mpi", "", "the peer's path: tcp or shm (default: tcp for -transport tcp or rdma, and for gloo, which has no shm; shm for shm)")
	fs.StringVar(&o.algo, "algo", "", "collbench -algo")
	fs.IntVar(&o.repeat, "repeat", 1, "pairs of runs; the table shows the median per size")
	fs.BoolVar(&o.alternate, "alternate", true, "alternate which side runs first from pair to pair")
	fs.StringVar(&o.peers, "peers", "", "the peers' script (default: $GOCOLL_PEERS, else bench/compare/peers/run.sh of this module)")
	fs.StringVar(&o.collbench, "collbench", "", "collbench binary (default: built from this module)")
	fs.StringVar(&o.grun, "grun", "", "grun binary (default: built from this module)")
	fs.StringVar(&o.ours, "ours", "", "launch template for collbench, run by bash; {np} {collbench} {grun} are replaced and collbench's flags appended (default: {grun} -n {np} {collbench})")
	fs.StringVar(&o.theirs, "theirs", "", "command template for the peer's side, run by bash; {peer} {np} {min} {max} {mode} {peers} are replaced (default: bash {peers} {peer} {mode} {np} {min} {max})")
	fs.BoolVar(&o.membw, "membw", true, "print the machine's memory bandwidth (the peers' script's membw)")
	large := fs.String("large", "1M", "from this size on the busbw ratio is the headline, below it the time ratio")
	fs.StringVar(&o.save, "save", "", "directory to keep every run's output in (collbench JSON, the peer's text and JSON)")
	fs.StringVar(&o.plot, "plot", "", "draw the medians of both sides into this PNG")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound on each run")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), errUsage)
	}
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: want at least 1 rank: %w", o.n, errUsage)
	}
	if o.repeat < 1 {
		return o, fmt.Errorf("-repeat %d: want at least 1: %w", o.repeat, errUsage)
	}
	lo, err := parseSize(o.min)
	if err != nil {
		return o, fmt.Errorf("-min: %w", err)
	}
	hi, err := parseSize(o.max)
	if err != nil {
		return o, fmt.Errorf("-max: %w", err)
	}
	if lo < 1 || lo > hi {
		return o, fmt.Errorf("-min %d, -max %d: want 1 <= min <= max: %w", lo, hi, errUsage)
	}
	// The peers take plain byte counts.
	o.min, o.max = strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)
	if o.large, err = parseSize(*large); err != nil {
		return o, fmt.Errorf("-large: %w", err)
	}
	if _, ok := peerNames[o.peer]; !ok {
		return o, fmt.Errorf("-peer %q: want openmpi, mpich or gloo: %w", o.peer, errUsage)
	}
	if o.mpiMode == "" {
		o.mpiMode = "tcp"
		if o.transport == "shm" && o.peer != "gloo" {
			o.mpiMode = "shm"
		}
	}
	if o.mpiMode != "tcp" && o.mpiMode != "shm" || o.peer == "gloo" && o.mpiMode != "tcp" {
		return o, fmt.Errorf("-mpi %q with -peer %s: want tcp or shm (gloo: tcp only): %w", o.mpiMode, o.peer, errUsage)
	}
	return o, nil
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	// A launch template without {grun} (mpirun on a cluster) needs no grun.
	needGrun := o.ours == "" || strings.Contains(o.ours, "{grun}")
	root, err := moduleRoot()
	if err != nil && (o.collbench == "" || (needGrun && o.grun == "") || o.peers == "") {
		return err
	}
	if o.peers == "" {
		if o.peers, err = findPeers(root); err != nil {
			return err
		}
	}
	if o.collbench == "" || (needGrun && o.grun == "") {
		dir, err := os.MkdirTemp("", "compare-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(stderr, "compare: building collbench and grun from %s\n", root)
		if o.collbench == "" {
			o.collbench = filepath.Join(dir, "collbench")
			if err := goBuild(ctx, root, o.collbench, "./bench"); err != nil {
				return err
			}
		}
		if needGrun && o.grun == "" {
			o.grun = filepath.Join(dir, "grun")
			if err := goBuild(ctx, root, o.grun, "./cmd/grun"); err != nil {
				return err
			}
		}
	}
	if o.save != "" {
		if err := os.MkdirAll(o.save, 0o755); err != nil {
			return err
		}
	}
	var ours, theirs []report.Result
	for i := 0; i < o.repeat; i++ {
		first, second := "ours", "theirs"
		if o.alternate && i%2 == 1 {
			first, second = second, first
		}
		for _, side := range []string{first, second} {
			fmt.Fprintf(stderr, "compare: run %d of %d: %s\n", i+1, o.repeat, map[string]string{"ours": "collbench", "theirs": peerNames[o.peer]}[side])
			if side == "ours" {
				r, err := runOurs(ctx, o, root, i)
				if err != nil {
					return err
				}
				ours = append(ours, r)
			} else {
				r, err := runTheirs(ctx, o, i)
				if err != nil {
					return err
				}
				theirs = append(theirs, r)
			}
		}
	}
	var membw []string
	if o.membw {
		out, err := command(ctx, o.timeout, "", "bash", o.peers, "membw")
		if err != nil {
			return fmt.Errorf("%s membw: %w", o.peers, err)
		}
		membw = strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	a, b := median(ours), median(theirs)
	a.Meta.Label = fmt.Sprintf("gocoll %s, %d ranks", o.transport, o.n)
	b.Meta.Label = fmt.Sprintf("%s %s, %d ranks", peerNames[o.peer], o.mpiMode, o.n)
	printTable(stdout, o, a, b, membw)
	if o.plot != "" {
		if err := report.Plot(o.plot, []report.Result{a, b}, []string{a.Meta.Label, b.Meta.Label}); err != nil {
			return err
		}
	}
	return nil
}

func runOurs(ctx context.Context, o options, root string, i int) (report.Result, error) {
	flags := []string{"-op", "allreduce", "-dtype", "float32", "-redop", "sum", "-min", o.min, "-max", o.max,
		"-transport", o.transport, "-format", "json"}
	if o.algo != "" {
		flags = append(flags, "-algo", o.algo)
	}
	var out []byte
	var err error
	if o.ours == "" {
		out, err = command(ctx, o.timeout, root, o.grun, append([]string{"-n", strconv.Itoa(o.n), o.collbench}, flags...)...)
	} else {
		line := fill(o.ours, map[string]string{"np": strconv.Itoa(o.n), "collbench": o.collbench, "grun": o.grun})
		for _, f := range flags {
			line += " " + shellQuote(f)
		}
		out, err = command(ctx, o.timeout, root, "bash", "-c", line)
	}
	if err != nil {
		return report.Result{}, fmt.Errorf("collbench: %w", err)
	}
	if o.save != "" {
		os.WriteFile(filepath.Join(o.save, fmt.Sprintf("gocoll-%d.json", i+1)), out, 0o644)
	}
	start := bytes.IndexByte(out, '{')
	if start < 0 {
		return report.Result{}, fmt.Errorf("collbench printed no JSON:\n%s", out)
	}
	return report.Decode(bytes.NewReader(out[start:]))
}

func runTheirs(ctx context.Context, o options, i int) (report.Result, error) {
	tmpl := o.theirs
	if tmpl == "" {
		tmpl = "bash {peers} {peer} {mode} {np} {min} {max}"
	}
	min, warm := peerMin(o.min)
	line := fill(tmpl, map[string]string{"np": strconv.Itoa(o.n), "min": min, "max": o.max, "mode": o.mpiMode, "peers": shellQuote(o.peers), "peer": o.peer})
	out, err := command(ctx, o.timeout, "", "bash", "-c", line)
	if err != nil {
		return report.Result{}, fmt.Errorf("%s: %w", peerNames[o.peer], err)
	}
	res, err := parseMPI(out, o.n, peerNames[o.peer])
	if err != nil {
		return report.Result{}, err
	}
	if warm {
		res.Rows = dropBelow(res.Rows, o.min)
	}
	res.Meta.Transport, res.Meta.Args = o.mpiMode, []string{line}
	if o.save != "" {
		os.WriteFile(filepath.Join(o.save, fmt.Sprintf("%s-%d.txt", o.peer, i+1)), out, 0o644)
		var buf bytes.Buffer
		report.Write(&buf, res)
		os.WriteFile(filepath.Join(o.save, fmt.Sprintf("%s-%d.json", o.peer, i+1)), buf.Bytes(), 0o644)
	}
	return res, nil
}

// peerMin is the size the peer's sweep starts at, for a comparison that
// starts at min (plain bytes): half of it, a row to be dropped, when that
// is still a whole number of float32 elements. A peer times each size
// after only three untimed calls, and its first size runs cold: 8 bytes
// took 0.33-0.41 us as the first row and 0.19-0.27 us after a 4-byte row
// (Open MPI over shared memory, 2 ranks, four runs each way on this VM).
// collbench settles before its first row, so without this the comparison
// would favour gocoll at its smallest size.
func peerMin(min string) (string, bool) {
	n, err := strconv.ParseInt(min, 10, 64)
	if err != nil || n < 8 || (n/2)%4 != 0 {
		return min, false
	}
	return strconv.FormatInt(n/2, 10), true
}

// dropBelow keeps the rows of min bytes (plain bytes) or more.
func dropBelow(rows []report.Row, min string) []report.Row {
	n, _ := strconv.ParseInt(min, 10, 64)
	kept := rows[:0]
	for _, r := range rows {
		if r.Size >= n {
			kept = append(kept, r)
		}
	}
	return kept
}

// parseMPI reads a peer's table (size count time_us algbw busbw wrong)
// into a result, skipping its header and anything else the launcher
// printed.
func parseMPI(out []byte, n int, tool string) (report.Result, error) {
	host, _ := os.Hostname()
	res := report.Result{Meta: report.Meta{Tool: tool, Date: time.Now().UTC().Format(time.RFC3339), Host: host,
		Ranks: n, Op: "allreduce", DType: "float32", Redop: "sum", Root: -1, Algo: "peer", Check: true}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 6 {
			continue
		}
		var v [6]float64
		ok := true
		for i, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				ok = false
				break
			}
			v[i] = x
		}
		if !ok {
			continue
		}
		// The bandwidths are recomputed from the time: the script rounds
		// them to 3 decimals, which leaves small sizes at 0.000.
		res.Rows = append(res.Rows, withBW(report.Row{Size: int64(v[0]), Count: int64(v[1]), Type: "float32", Redop: "sum", Root: -1,
			TimeUS: v[2], Wrong: int64(v[5]), Algo: "peer"}, n))
	}
	if len(res.Rows) == 0 {
		return res, fmt.Errorf("%s printed no rows of size count time_us algbw busbw wrong:\n%s", tool, out)
	}
	return res, nil
}

// median merges repeated runs: per size, the median time, bandwidths
// recomputed from it, and the worst #wrong.
func median(runs []report.Result) report.Result {
	out := report.Result{Meta: runs[0].Meta}
	bySize := map[int64][]report.Row{}
	var sizes []int64
	for _, r := range runs {
		for _, row := range r.Rows {
			if _, ok := bySize[row.Size]; !ok {
				sizes = append(sizes, row.Size)
			}
			bySize[row.Size] = append(bySize[row.Size], row)
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	for _, s := range sizes {
		rows := bySize[s]
		sort.Slice(rows, func(i, j int) bool { return rows[i].TimeUS < rows[j].TimeUS })
		m := rows[len(rows)/2]
		if len(rows)%2 == 0 {
			m.TimeUS = (rows[len(rows)/2-1].TimeUS + m.TimeUS) / 2
		}
		for _, r := range rows {
			m.Wrong = max(m.Wrong, r.Wrong)
		}
		out.Rows = append(out.Rows, withBW(m, runs[0].Meta.Ranks))
	}
	return out
}

// withBW sets r's bandwidths from its time, in full precision: algbw is
// size/time, busbw scales it by allreduce's 2(n-1)/n.
func withBW(r report.Row, n int) report.Row {
	r.AlgBW, r.BusBW = 0, 0
	if r.TimeUS > 0 && n > 0 {
		r.AlgBW = float64(r.Size) / r.TimeUS / 1e3
		r.BusBW = r.AlgBW * 2 * float64(n-1) / float64(n)
	}
	return r
}

const (
	cmpHead = "%12s %12s %12s %10s %12s %12s %10s %9s  %s\n"
	cmpRow  = "%12d %12.2f %12.2f %10.3f %12.4f %12.4f %10.3f %9s  %s\n"
)

func printTable(w io.Writer, o options, ours, theirs report.Result, membw []string) {
	order := "same order each time"
	if o.alternate && o.repeat > 1 {
		order = "order alternated"
	}
	fmt.Fprintf(w, "# allreduce float32 sum, %d ranks: gocoll (transport %s) vs %s (%s); median of %d run(s), %s\n",
		o.n, o.transport, peerNames[o.peer], o.mpiMode, o.repeat, order)
	host, _ := os.Hostname()
	fmt.Fprintf(w, "# host %s, %s\n", host, time.Now().UTC().Format(time.RFC3339))
	for _, l := range membw {
		fmt.Fprintf(w, "# membw: %s\n", l)
	}
	fmt.Fprintf(w, "# time_ratio = gocoll/peer time (<1: gocoll faster); bw_ratio = gocoll/peer busbw (>1: gocoll faster);\n")
	fmt.Fprintf(w, "# ahead judges by time below %d B, by busbw from there on\n", o.large)
	if warmAt, warm := peerMin(o.min); warm {
		fmt.Fprintf(w, "# %s's sweep starts at %s B, a row left out: its first size runs cold\n", peerNames[o.peer], warmAt)
	}
	fmt.Fprintf(w, cmpHead, "size(B)", "gocoll(us)", "peer(us)", "time_ratio", "gocoll_busbw", "peer_busbw", "bw_ratio", "#wrong", "ahead")
	theirsBy := map[int64]report.Row{}
	for _, r := range theirs.Rows {
		theirsBy[r.Size] = r
	}
	for _, a := range ours.Rows {
		b, ok := theirsBy[a.Size]
		if !ok || a.TimeUS <= 0 || b.TimeUS <= 0 {
			continue
		}
		tr := a.TimeUS / b.TimeUS
		br := math.NaN()
		if b.BusBW > 0 {
			br = a.BusBW / b.BusBW
		}
		ahead := "no"
		if (a.Size < o.large && tr < 1) || (a.Size >= o.large && br > 1) {
			ahead = "yes"
		}
		fmt.Fprintf(w, cmpRow, a.Size, a.TimeUS, b.TimeUS, tr, a.BusBW, b.BusBW, br, fmt.Sprintf("%d/%d", a.Wrong, b.Wrong), ahead)
	}
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

// command runs name and returns its stdout; a failure carries its stderr.
func command(ctx context.Context, timeout time.Duration, dir, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
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
		return "", fmt.Errorf("finding the module (run compare inside the gocoll checkout, or pass -collbench, -grun and -peers): %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the gocoll module: run compare from the checkout, or pass -collbench, -grun and -peers")
	}
	return filepath.Dir(mod), nil
}

// peerNames are the peers compare knows, as tables and plots name them.
var peerNames = map[string]string{"openmpi": "Open MPI", "mpich": "MPICH", "gloo": "gloo"}

// findPeers is the peers' script this module carries, or $GOCOLL_PEERS.
func findPeers(root string) (string, error) {
	if p := os.Getenv("GOCOLL_PEERS"); p != "" {
		return p, nil
	}
	p := filepath.Join(root, "bench", "compare", "peers", "run.sh")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the peers' script: %w: pass -peers or set GOCOLL_PEERS", err)
	}
	return p, nil
}
