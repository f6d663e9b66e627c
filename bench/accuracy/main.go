// Command accuracy measures how far gocoll's Float16 and BFloat16 sums
// are from the exact sum, for jobs of 2 to 64 in-process ranks
// (comm.NewLocal), on random and adversarial data:
//
//	cd bench && go run ./accuracy            # the table, every rank count
//	go run ./accuracy -n 2,8,64 -count 512
//
// Every element's exact sum S and Σ|x| are computed in float64 (exact for
// these inputs). Each row gives, as the largest |error|/Σ|x| over the
// elements:
//
//   - "model16": a model of reducing in 16 bits: the inputs added in rank
//     order, each partial sum rounded to 16 bits (with the 1 first, the
//     swamp data's worst case);
//   - "16bit": what the library returns with GOCOLL_HALF_ACCUM=16bit,
//     which rounds every partial sum to 16 bits, the worst over every
//     way of computing it:
//     allreduce with each algorithm (ring, rd, rabenseifner, tree,
//     pairwise, and hier on two fake hosts from 3 ranks), reduce-scatter
//     and reduce;
//   - "float32": the same with GOCOLL_HALF_ACCUM=float32, the default,
//     which keeps partial sums in float32 and rounds once;
//   - "exactsum": the same for comm.ExactSum (every way computes it the
//     same way, whatever GOCOLL_ALGO says; it is run under each anyway):
//     the exact sum rounded once, so its error is the one rounding's;
//   - "sum!=RN" and "exact!=RN": how many results (over every way and
//     every rank holding one) differ from the exact sum correctly rounded
//     to the type, computed with math/big (internal/exactref): Sum's
//     float32 partials give the correctly rounded sum most of the time but
//     not always; ExactSum's count is zero, and the test asserts it;
//   - "of bound": float32's largest |error| over the documented bound,
//     u16·|S| + (1+u16)·γ(n-1)·Σ|x| + η, where u16 is the 16-bit unit
//     roundoff (2^-11, 2^-8), γ(k) = k·2^-24/(1-k·2^-24) float32's
//     accumulation error and η half the smallest 16-bit subnormal. Above 1
//     breaks the promise; the test of this package asserts it does not.
//
// The data, per element:
//
//   - random: normal, σ = 100, a different stream per rank;
//   - swamp: one rank (a different one per element) holds 1, every other
//     rank 3/4 of half 1's 16-bit ulp, which a 16-bit partial sum of 1 or
//     more rounds away each time: 16-bit partials lose (n-1)·3/8 ulp;
//   - cancel: rank q holds (-1)^q·(1+r) with r uniform in [0, 1):
//     partial sums swing about 0 while each term's rounding error stays
//     that of a number near 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/exactref"
	"github.com/gocoll/gocoll/internal/reduce"
)

func main() {
	ns := flag.String("n", "2,3,4,8,16,32,64", "rank counts, comma-separated")
	count := flag.Int("count", 1024, "elements per rank")
	transport := flag.String("transport", "auto", "transport of the in-process ranks (auto, tcp, shm)")
	types := flag.String("type", "float16,bfloat16", "element types, comma-separated")
	flag.Parse()
	dtypes = nil
	for _, f := range strings.Split(*types, ",") {
		switch strings.TrimSpace(f) {
		case "float16":
			dtypes = append(dtypes, reduce.Float16)
		case "bfloat16":
			dtypes = append(dtypes, reduce.BFloat16)
		default:
			fmt.Fprintf(os.Stderr, "accuracy: -type: %q is not float16 or bfloat16\n", f)
			os.Exit(2)
		}
	}
	var counts []int
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "accuracy: -n: %q is not a rank count\n", f)
			os.Exit(2)
		}
		counts = append(counts, n)
	}
	if *count < 1 {
		fmt.Fprintln(os.Stderr, "accuracy: -count must be at least 1")
		os.Exit(2)
	}
	if err := table(context.Background(), os.Stdout, counts, *count, *transport); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

// Data names the inputs of a measurement.
type Data string

// The data sets (see the package documentation).
const (
	Random Data = "random"
	Swamp  Data = "swamp"
	Cancel Data = "cancel"
)

var (
	dtypes   = []reduce.DType{reduce.Float16, reduce.BFloat16}
	datasets = []Data{Random, Swamp, Cancel}
)

func table(ctx context.Context, w io.Writer, ns []int, count int, transport string) error {
	fmt.Fprintf(w, "max |error| / sum|x| over %d elements per rank; \"of bound\": max |error| / documented bound\n", count)
	fmt.Fprintf(w, "%-9s %-7s %4s  %10s  %10s  %10s  %10s  %8s  %9s  %8s\n", "type", "data", "n", "model16", "16bit", "float32", "exactsum", "sum!=RN", "exact!=RN", "of bound")
	for _, dt := range dtypes {
		for _, data := range datasets {
			for _, n := range ns {
				res, err := Measure(ctx, n, count, dt, data, transport)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%-9v %-7s %4d  %10.3e  %10.3e  %10.3e  %10.3e  %8d  %9d  %8.3f\n", dt, data, n, res.Partials16, res.Lib16, res.Lib, res.Exact, res.SumOff, res.ExactOff, res.OfBound)
			}
		}
	}
	return nil
}

// Result is one measurement: the largest |error|/Σ|x| of the 16-bit
// partials model, of the library rounding 16-bit partials (Lib16),
// keeping them in float32 (Lib) and of ExactSum (Exact), and Lib's
// largest |error|/bound, with the way of computing that gave it; and
// how many of Sum's (float32 partials) and ExactSum's results differ
// from the correctly rounded sum.
type Result struct {
	Partials16, Lib16, Lib, Exact, OfBound float64
	SumOff, ExactOff                       int
	Worst                                  string
}

// inputs returns every rank's count elements of dt for data, as float64
// (each exactly a dt value).
func inputs(n, count int, dt reduce.DType, data Data) [][]float64 {
	in := make([][]float64, n)
	ulpHalf := 0x1p-11 // half of 1's ulp in binary16
	if dt == reduce.BFloat16 {
		ulpHalf = 0x1p-8
	}
	for q := range in {
		rng := rand.New(rand.NewSource(int64(q)*7919 + int64(len(data))*31 + int64(dt)))
		in[q] = make([]float64, count)
		for i := range in[q] {
			var v float64
			switch data {
			case Random:
				v = rng.NormFloat64() * 100
			case Swamp:
				v = 0.75 * ulpHalf
				if i%n == q {
					v = 1
				}
			case Cancel:
				v = 1 + rng.Float64()
				if q%2 == 1 {
					v = -v
				}
			}
			in[q][i] = round16(dt, v)
		}
	}
	return in
}

func round16(dt reduce.DType, v float64) float64 {
	if dt == reduce.BFloat16 {
		return float64(reduce.BF16ToF32(reduce.F32ToBF16(float32(v))))
	}
	return float64(reduce.F16ToF32(reduce.F32ToF16(float32(v))))
}

// Bound is the documented error bound of a 16-bit sum of n terms with
// exact sum s and Σ|x| abs: one 16-bit rounding of the float32 sum, whose
// own error is float32's accumulation error over n-1 additions.
func Bound(dt reduce.DType, n int, s, abs float64) float64 {
	u16, eta := 0x1p-11, 0x1p-25
	if dt == reduce.BFloat16 {
		u16, eta = 0x1p-8, 0x1p-134
	}
	k := float64(n-1) * 0x1p-24
	e32 := k / (1 - k) * abs
	return u16*math.Abs(s) + (1+u16)*e32 + eta
}

const accumVar = "GOCOLL_HALF_ACCUM"

// ways are the collectives and algorithms a sum is computed with: the
// allreduce algorithm (GOCOLL_ALGO syntax), or "reducescatter", "reduce"
// (with the default algorithms), or "hier" (allreduce on two fake hosts).
func ways(n int) []string {
	w := []string{"ring", "rd", "rabenseifner", "tree", "pairwise", "reducescatter", "reduce"}
	if n >= 3 {
		w = append(w, "hier")
	}
	return w
}

// Measure runs one row: n ranks, count elements each.
func Measure(ctx context.Context, n, count int, dt reduce.DType, data Data, transport string) (Result, error) {
	in := inputs(n, count, dt, data)
	var res Result
	exact, abs := make([]float64, count), make([]float64, count)
	rn := correctlyRounded(dt, in)
	for i := 0; i < count; i++ {
		p := float32(in[0][i])
		for q := 0; q < n; q++ {
			exact[i] += in[q][i]
			abs[i] += math.Abs(in[q][i])
			if q > 0 {
				p = float32(round16(dt, float64(p+float32(in[q][i]))))
			}
		}
		res.Partials16 = max(res.Partials16, math.Abs(float64(p)-exact[i])/abs[i])
	}
	// NewLocal's ranks read GOCOLL_HALF_ACCUM; the caller's value is put
	// back after.
	old, had := os.LookupEnv(accumVar)
	defer func() {
		if had {
			os.Setenv(accumVar, old)
		} else {
			os.Unsetenv(accumVar)
		}
	}()
	for _, mode := range []string{"16bit", "float32", "exactsum"} {
		op := comm.Sum
		if mode == "exactsum" {
			op = comm.ExactSum
		} else {
			os.Setenv(accumVar, mode)
		}
		for _, way := range ways(n) {
			results, err := compute(ctx, n, count, dt, in, way, transport, op)
			if err != nil {
				return res, fmt.Errorf("%v %s n=%d %s %s=%s: %w", dt, data, n, way, accumVar, mode, err)
			}
			for _, got := range results {
				for i := 0; i < count; i++ {
					if r := math.Abs(got[i]-exact[i]) / abs[i]; r > res.Lib16 && mode == "16bit" {
						res.Lib16 = r
					}
				}
			}
			if mode == "16bit" {
				continue
			}
			for _, got := range results {
				for i := 0; i < count; i++ {
					if got[i] == rn[i] {
						continue
					}
					if mode == "exactsum" {
						res.ExactOff++
					} else {
						res.SumOff++
					}
				}
			}
			if mode == "exactsum" {
				for _, got := range results {
					for i := 0; i < count; i++ {
						res.Exact = max(res.Exact, math.Abs(got[i]-exact[i])/abs[i])
					}
				}
				continue
			}
			for q, got := range results {
				for i := 0; i < count; i++ {
					e := math.Abs(got[i] - exact[i])
					if r := e / abs[i]; r > res.Lib {
						res.Lib = r
					}
					if r := e / Bound(dt, n, exact[i], abs[i]); r > res.OfBound {
						res.OfBound, res.Worst = r, fmt.Sprintf("%s, rank %d element %d: got %v, exact %v", way, q, i, got[i], exact[i])
					}
				}
			}
		}
	}
	return res, nil
}

// compute has n in-process ranks sum in (rank q's elements in[q]) one
// way, and returns the sum as each rank that computed it holds it: for an
// allreduce every rank, after checking that all hold the same bits; for
// reduce-scatter every rank, each block summed along its own path; for
// reduce the root.
func compute(ctx context.Context, n, count int, dt reduce.DType, in [][]float64, way, transport string, op comm.Op) ([][]float64, error) {
	opts := []comm.Option{comm.WithTransport(transport), comm.WithTimeout(2 * time.Minute)}
	switch way {
	case "reducescatter", "reduce":
	case "hier":
		// Two hosts of n/2 ranks each, as NewLocal reads them from the
		// environment.
		restore := setEnv("GOCOLL_FAKE_HOSTS", "2")
		defer restore()
	default:
		opts = append(opts, comm.WithAlgorithm("allreduce="+way))
	}
	// Building a job of many in-process ranks on a loaded machine now and
	// then fails (a rank's share of the mesh setup times out); what is
	// measured here is the sum, so try again, a few times.
	var cs []*comm.Communicator
	var err error
	for try := 0; try < 3; try++ {
		if cs, err = comm.NewLocal(ctx, n, opts...); err == nil {
			break
		}
		fmt.Fprintf(os.Stderr, "accuracy: %d ranks: %v (trying again)\n", n, err)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		// Together: Close waits a moment for the others to close too.
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	}()
	if dt == reduce.BFloat16 {
		return run(ctx, cs, count, in, way, op, comm.BFloat16Of, comm.BFloat16.Float32)
	}
	return run(ctx, cs, count, in, way, op, comm.Float16Of, comm.Float16.Float32)
}

func run[T comm.Float16 | comm.BFloat16](ctx context.Context, cs []*comm.Communicator, count int, in [][]float64, way string, op comm.Op, of func(float32) T, to func(T) float32) ([][]float64, error) {
	n := len(cs)
	send, out := make([][]T, n), make([][]T, n)
	for q := range send {
		send[q] = make([]T, count*n) // reducescatter takes n blocks of count
		for i := range send[q] {
			send[q][i] = of(float32(in[q][i%count]))
		}
		out[q] = make([]T, count*n)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for q, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch way {
			case "reducescatter":
				// Rank q's block is the same count elements as in every
				// block, so every rank's result is the whole sum.
				errs[q] = comm.ReduceScatter(ctx, c, send[q], out[q][:count], op)
			case "reduce":
				errs[q] = comm.Reduce(ctx, c, send[q][:count], out[q][:count], op, 0)
			default:
				copy(out[q], send[q][:count])
				errs[q] = comm.AllReduce(ctx, c, out[q][:count], op)
			}
		}()
	}
	wg.Wait()
	for q, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", q, err)
		}
	}
	holders := n
	if way == "reduce" {
		holders = 1
	}
	if way != "reduce" && way != "reducescatter" {
		for q := 1; q < n; q++ {
			for i := 0; i < count; i++ {
				if out[q][i] != out[0][i] {
					return nil, fmt.Errorf("rank %d element %d: %v, rank 0 has %v: ranks disagree", q, i, to(out[q][i]), to(out[0][i]))
				}
			}
		}
	}
	got := make([][]float64, holders)
	for q := range got {
		got[q] = make([]float64, count)
		for i := range got[q] {
			got[q][i] = float64(to(out[q][i]))
		}
	}
	return got, nil
}

// correctlyRounded is each element's exact sum rounded once to dt, by
// exactref's math/big reference, as a float64.
func correctlyRounded(dt reduce.DType, in [][]float64) []float64 {
	f, bits := exactref.Float16, func(v float64) uint64 { return uint64(reduce.F32ToF16(float32(v))) }
	if dt == reduce.BFloat16 {
		f, bits = exactref.BFloat16, func(v float64) uint64 { return uint64(reduce.F32ToBF16(float32(v))) }
	}
	out := make([]float64, len(in[0]))
	xs := make([]uint64, len(in))
	for i := range out {
		for q := range in {
			xs[q] = bits(in[q][i]) // exact: in holds values of dt
		}
		out[i] = exactref.Value(f, exactref.Sum(f, xs))
	}
	return out
}

// setEnv sets the variable k to v and returns what puts it back.
func setEnv(k, v string) (restore func()) {
	old, had := os.LookupEnv(k)
	os.Setenv(k, v)
	return func() {
		if had {
			os.Setenv(k, old)
		} else {
			os.Unsetenv(k)
		}
	}
}
