package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// errUsage marks bad command-line input: collbench exits 2 for it, before
// joining the job, so a typo never leaves ranks waiting for each other.
var errUsage = errors.New("usage")

// maxSizes bounds a sweep's rows: -step 1 up to 64M would never end.
const maxSizes = 10000

// maxBytes bounds one buffer. Beyond it a typo (-max 64G for 64M) would
// take the machine's memory rather than give an error.
const maxBytes = 1 << 36

type config struct {
	op, dtype, redop string
	root             int
	min, max         int64
	factor           int64
	step             int64
	iters, warmup    int
	settle           int
	spin             time.Duration
	check            bool
	register         bool
	alloc            bool
	traffic          bool
	transport, algo  string
	format           string
	plot             string
	progress         bool
	label            string
}

// parseSize reads a byte count with an optional K, M or G suffix (powers
// of 1024, either case, "B" or "iB" after it allowed: 64K, 64KiB, 16M, 1G).
func parseSize(s string) (int64, error) {
	v := strings.TrimSpace(s)
	u := strings.ToUpper(v)
	if strings.HasSuffix(u, "IB") {
		u = strings.TrimSuffix(u, "IB")
	} else {
		u = strings.TrimSuffix(u, "B")
	}
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
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size in bytes (examples: 8, 64K, 16M, 1G; suffixes are powers of 1024)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q overflows 64 bits", s)
	}
	return n * mult, nil
}

type sizeValue struct{ p *int64 }

func (v sizeValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// parseConfig reads and validates collbench's flags. Everything that can
// be checked before the job starts is checked here.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	cfg := config{min: 8, max: 64 << 20, factor: 2}
	fs := flag.NewFlagSet("collbench", flag.ContinueOnError)
	// The flag package's own report of a bad flag comes with the whole
	// usage text, once per rank; collbench says what was wrong in one line
	// and prints the usage for -h only.
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.op, "op", "allreduce", "collective: "+strings.Join(opNames(), ", "))
	fs.StringVar(&cfg.dtype, "dtype", "float32", "element type: "+strings.Join(dtypeNames(), ", "))
	fs.StringVar(&cfg.redop, "redop", "sum", "reduction for reducing collectives: sum, prod, min, max, avg (floats only), exactsum (correctly rounded sum; sum on integers)")
	fs.IntVar(&cfg.root, "root", 0, "root rank for rooted collectives")
	fs.Var(sizeValue{&cfg.min}, "min", "smallest size in bytes (K/M/G suffixes, powers of 1024)")
	fs.Var(sizeValue{&cfg.max}, "max", "largest size in bytes (K/M/G suffixes)")
	fs.Int64Var(&cfg.factor, "factor", 2, "multiply the size by this between rows (at least 2)")
	fs.Var(sizeValue{&cfg.step}, "step", "add this many bytes between rows instead of multiplying (K/M/G suffixes)")
	fs.IntVar(&cfg.iters, "iters", 0, "timed iterations per size (0: 200 below 1 MiB, 20 below 16 MiB, else 5, as compare/peers/allreduce.c)")
	fs.IntVar(&cfg.warmup, "warmup", 3, "untimed iterations per size")
	fs.IntVar(&cfg.settle, "settle", 3000, "untimed barriers before the sweep, while the ranks' runtimes settle")
	fs.DurationVar(&cfg.spin, "spin", 50*time.Millisecond, "busy time of each rank on its CPU before the settling barriers, so that idle CPUs reach full speed first")
	fs.BoolVar(&cfg.register, "register", false, "register the buffers (comm.Register): over RDMA, large messages are sent straight from them; on ranks of one host over shm, allreduce reads the peers' buffers with process_vm_readv (the single-copy path)")
	fs.BoolVar(&cfg.alloc, "alloc", false, "allocate the buffers with comm.Alloc: on ranks of one host over shm, allreduce then reads every rank's buffer in place (the single-copy path)")
	fs.BoolVar(&cfg.traffic, "traffic", false, "count the bytes each rank moves through memory (comm.WithTraffic) and print them per byte of the collective (column moved/B)")
	fs.BoolVar(&cfg.check, "check", true, "verify every result against known inputs (count wrong elements; exit 1 if any)")
	fs.StringVar(&cfg.transport, "transport", "", "transport: auto, tcp, shm, rdma (default: GOCOLL_TRANSPORT, else auto)")
	fs.StringVar(&cfg.algo, "algo", "", "force algorithms, GOCOLL_ALGO syntax: ring, or allreduce=rd,broadcast=chain (default: GOCOLL_ALGO)")
	fs.StringVar(&cfg.format, "format", "table", "output: table, csv or json")
	fs.StringVar(&cfg.plot, "plot", "", "also draw busbw and time against size into this PNG")
	fs.BoolVar(&cfg.progress, "progress", false, "progress line on stderr even when stderr is not a terminal")
	fs.StringVar(&cfg.label, "label", "", "name of this run in plots (default: drawn from the metadata)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: grun -n N collbench [flags]\n       collbench plot [-o out.png] a.json [b.json ...]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return cfg, err
		}
		return cfg, fmt.Errorf("%v (collbench -h lists the flags): %w", err, errUsage)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (flags only; did you mean 'collbench plot'?): %w", fs.Arg(0), errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.transport == "" {
		cfg.transport = os.Getenv("GOCOLL_TRANSPORT")
	}
	if cfg.algo == "" {
		cfg.algo = os.Getenv("GOCOLL_ALGO")
	}
	return cfg, validate(&cfg, set)
}

func validate(cfg *config, set map[string]bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, errUsage)...)
	}
	cfg.op = strings.ToLower(cfg.op)
	if _, ok := findOp(cfg.op); !ok {
		return bad("-op %q: unknown collective (known: %s)", cfg.op, strings.Join(opNames(), ", "))
	}
	dt, ok := dtypeByName(cfg.dtype)
	if !ok {
		return bad("-dtype %q: unknown element type (known: %s)", cfg.dtype, strings.Join(dtypeNames(), ", "))
	}
	cfg.dtype = dt.name
	cfg.redop = strings.ToLower(cfg.redop)
	rop, ok := redops[cfg.redop]
	if !ok {
		return bad("-redop %q: unknown reduction (known: sum, prod, min, max, avg, exactsum)", cfg.redop)
	}
	if spec, _ := findOp(cfg.op); spec.reduces && rop.floatOnly && !dt.float {
		return bad("-redop %s needs a floating-point -dtype, not %s (use sum and divide)", cfg.redop, cfg.dtype)
	}
	if cfg.alloc && cfg.register {
		return bad("-alloc and -register: memory from Alloc cannot be registered too (pick one single-copy path)")
	}
	if cfg.alloc && cfg.op != "allreduce" {
		return bad("-alloc is for -op allreduce (the one collective with a single-copy path), not %s", cfg.op)
	}
	if cfg.root < 0 {
		return bad("-root %d: want a rank >= 0", cfg.root)
	}
	if cfg.min < 1 {
		return bad("-min %d: want at least 1 byte", cfg.min)
	}
	if cfg.min > cfg.max {
		return bad("-min %d is larger than -max %d", cfg.min, cfg.max)
	}
	if cfg.max > maxBytes {
		return bad("-max %d: more than %d bytes per buffer", cfg.max, int64(maxBytes))
	}
	if set["step"] && set["factor"] {
		return bad("-step and -factor both given: pick linear (-step) or geometric (-factor) sizes")
	}
	if set["step"] {
		if cfg.step < 1 {
			return bad("-step %d: want at least 1 byte", cfg.step)
		}
		cfg.factor = 0
	} else if cfg.factor < 2 {
		return bad("-factor %d: want at least 2 (for evenly spaced sizes use -step)", cfg.factor)
	}
	if len(sweep(cfg.min, cfg.max, cfg.factor, cfg.step)) > maxSizes {
		return bad("the sweep from -min %d to -max %d has more than %d sizes: use a larger -step or -factor", cfg.min, cfg.max, maxSizes)
	}
	if cfg.iters < 0 {
		return bad("-iters %d: want 0 (by size) or more", cfg.iters)
	}
	if cfg.warmup < 0 {
		return bad("-warmup %d: want 0 or more", cfg.warmup)
	}
	if cfg.settle < 0 {
		return bad("-settle %d: want 0 or more", cfg.settle)
	}
	if cfg.spin < 0 {
		return bad("-spin %v: want 0 or more", cfg.spin)
	}
	cfg.format = strings.ToLower(cfg.format)
	switch cfg.format {
	case "table", "csv", "json":
	default:
		return bad("-format %q: want table, csv or json", cfg.format)
	}
	cfg.transport = strings.ToLower(strings.TrimSpace(cfg.transport))
	switch cfg.transport {
	case "":
		cfg.transport = "auto"
	case "auto", "tcp", "shm", "rdma":
	default:
		return bad("-transport %q: want auto, tcp, shm or rdma", cfg.transport)
	}
	return nil
}

// sweep lists the sizes from min to max: min, min*factor, ... when factor
// is set, else min, min+step, ... . It stops early past maxSizes+1 entries,
// enough for the caller to refuse the sweep.
func sweep(min, max, factor, step int64) []int64 {
	var out []int64
	for s := min; s <= max && len(out) <= maxSizes; {
		out = append(out, s)
		var next int64
		if factor >= 2 {
			if s > math.MaxInt64/factor {
				break
			}
			next = s * factor
		} else {
			if step < 1 || s > math.MaxInt64-step {
				break
			}
			next = s + step
		}
		s = next
	}
	return out
}

// iterations is -iters, or by default the counts compare/peers/allreduce.c
// uses, so that the two tools' rows average over the same number of calls.
func iterations(cfg config, size int64) int {
	switch {
	case cfg.iters > 0:
		return cfg.iters
	case size < 1<<20:
		return 200
	case size < 16<<20:
		return 20
	default:
		return 5
	}
}

// algoFor is what -algo or GOCOLL_ALGO forced for op, or "auto". The
// communicator cannot yet say which algorithm it chose.
func algoFor(spec, op string) string {
	spec = strings.ToLower(strings.TrimSpace(spec))
	if spec == "" {
		return "auto"
	}
	if !strings.Contains(spec, "=") {
		return spec
	}
	for _, part := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(part, "=")
		if strings.TrimSpace(k) == op {
			return strings.TrimSpace(v)
		}
	}
	return "auto"
}
