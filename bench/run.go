package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/bench/internal/report"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/comm"
)

// errWrong reports a sweep in which -check found wrong elements.
var errWrong = errors.New("wrong results")

// env is one run: the job, the validated flags, and where rank 0 reports.
type env struct {
	ctx      context.Context
	c        *comm.Communicator
	cfg      config
	out      sink                 // rank 0 only; nil elsewhere
	progress io.Writer            // rank 0's progress line, or nil
	tty      bool                 // progress overwrites one line
	traffic  *collectives.Traffic // -traffic's counts, or nil
}

// bench runs cfg's sweep with elements of type T.
func bench[T comm.Element](e env) error {
	spec, ok := lookup[T](e.cfg.op)
	if !ok {
		return fmt.Errorf("-op %q: unknown collective: %w", e.cfg.op, errUsage)
	}
	return benchSpec(e, spec)
}

func benchSpec[T comm.Element](e env, spec opSpec[T]) error {
	ctx, c, cfg := e.ctx, e.c, e.cfg
	n, rank := c.Size(), c.Rank()
	if spec.rooted && cfg.root >= n {
		return fmt.Errorf("-root %d: the job has ranks 0 to %d: %w", cfg.root, n-1, errUsage)
	}
	p := params{n: n, rank: rank, root: cfg.root, redop: redops[cfg.redop].op}
	if !spec.reduces {
		p.redop = comm.Sum // unused: the inputs are moveInput's
	}
	var zero T
	esize := int64(unsafe.Sizeof(zero))
	sizes := sweep(cfg.min, cfg.max, cfg.factor, cfg.step)
	if spec.sizeless {
		sizes = []int64{0}
	}
	maxSend, maxRecv := 0, 0
	for _, size := range sizes {
		if s, r, ok := spec.layout(int(size/esize), n, rank); ok {
			maxSend, maxRecv = max(maxSend, s), max(maxRecv, r)
		}
	}
	pt := newPatterns[T](spec.reduces, p.redop, n)
	send, recv, free, err := buffers[T](e, maxSend, maxRecv)
	if err != nil {
		return err
	}
	defer free()
	// Fault the buffers in and finish the garbage collection their
	// allocation set off now, so neither lands in the first rows' timings.
	p.send, p.recv = maxSend, maxRecv
	pt.fillInput(send, rank)
	pt.fillPoison(recv, func(i int) origin { return spec.src(p, rank, i) })
	if cfg.register {
		for _, b := range [][]T{send, recv} {
			if len(b) == 0 {
				continue
			}
			reg, err := comm.Register(ctx, c, b)
			if err != nil {
				return err
			}
			defer reg.Close()
		}
	}
	runtime.GC()
	// A CPU that sat idle through the rendezvous (ranks sleep in it) runs
	// slow for milliseconds once busy again: on this project's VM the
	// first thousands of 8-byte allreduces over shared memory took about
	// twice as long as the rest, unless the ranks had spun for 20 ms
	// first (see -spin in README.md). Open MPI's ranks poll through their
	// wire-up, so they start warm; these spin alone (no collective: the
	// count of calls could differ between ranks), then settle together.
	for start := time.Now(); time.Since(start) < cfg.spin; {
	}
	// The first tens of milliseconds after Init also run slow on a small
	// machine (every rank's fresh runtime is still busy), so the sweep
	// starts after a fixed number of untimed barriers: every rank makes
	// the same calls.
	for i := 0; i < cfg.settle; i++ {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	if e.out != nil {
		e.out.begin()
	}
	var totalWrong int64
	algo := algoFor(cfg.algo, spec.name)
	redop, root := cfg.redop, cfg.root
	if !spec.reduces {
		redop = "none"
	}
	if !spec.rooted {
		root = -1
	}
	for idx, size := range sizes {
		sl, rl, ok := spec.layout(int(size/esize), n, rank)
		if !ok {
			continue
		}
		p.send, p.recv = sl, rl
		s, r := send[:sl], recv[:rl]
		bytes := int64(max(sl, rl)) * esize
		it := iterations(cfg, bytes)
		if e.progress != nil {
			progressLine(e.progress, e.tty, fmt.Sprintf("%s %s: size %d B (%d of %d), %d iterations", spec.name, cfg.dtype, bytes, idx+1, len(sizes), it))
		}
		for w := 0; w < cfg.warmup; w++ {
			if err := spec.run(ctx, c, s, r, p); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		var before collectives.TrafficCounts
		if e.traffic != nil {
			before = e.traffic.Counts()
		}
		start := time.Now()
		for i := 0; i < it; i++ {
			if err := spec.run(ctx, c, s, r, p); err != nil {
				return err
			}
		}
		mean := []float64{time.Since(start).Seconds() / float64(it)}
		var moved float64
		if e.traffic != nil && bytes > 0 {
			// Counted before the calls below, which are not the sweep's.
			m := []float64{float64(e.traffic.Counts().Moved()-before.Moved()) / float64(it) / float64(bytes)}
			if err := comm.AllReduce(ctx, c, m, comm.Sum); err != nil {
				return err
			}
			moved = m[0] / float64(n)
		}
		if err := comm.AllReduce(ctx, c, mean, comm.Max); err != nil {
			return err
		}
		wrong := int64(-1)
		if cfg.check && !spec.sizeless {
			src := func(i int) origin { return spec.src(p, rank, i) }
			pt.fillInput(s, rank)
			pt.fillPoison(r, src)
			if err := spec.run(ctx, c, s, r, p); err != nil {
				return err
			}
			res := r
			if rl == 0 {
				res = s
			}
			w := []int64{pt.countWrong(res, src)}
			if err := comm.AllReduce(ctx, c, w, comm.Sum); err != nil {
				return err
			}
			wrong = w[0]
			totalWrong += wrong
		}
		if e.out != nil {
			row := report.Row{Size: bytes, Count: int64(spec.countOf(sl, rl, n)), Type: cfg.dtype, Redop: redop, Root: root,
				TimeUS: mean[0] * 1e6, Wrong: wrong, Algo: algo, Iters: it, MovedPerByte: moved}
			if mean[0] > 0 {
				row.AlgBW = float64(bytes) / mean[0] / 1e9
				row.BusBW = row.AlgBW * spec.bus(n)
			}
			if err := e.out.row(row); err != nil {
				return err
			}
		}
	}
	if e.progress != nil && e.tty {
		progressLine(e.progress, true, "")
	}
	if totalWrong > 0 {
		return fmt.Errorf("-check: %d wrong elements in all (see the #wrong column): %w", totalWrong, errWrong)
	}
	return nil
}

// buffers are the send and receive buffers of a sweep: Go's memory, or
// with -alloc memory from comm.Alloc, which free gives back.
func buffers[T comm.Element](e env, send, recv int) ([]T, []T, func(), error) {
	if !e.cfg.alloc {
		return make([]T, send), make([]T, recv), func() {}, nil
	}
	var bufs [2][]T
	var frees []func() error
	free := func() {
		for _, f := range frees {
			f()
		}
	}
	for i, n := range []int{send, recv} {
		if n == 0 {
			continue
		}
		s, err := comm.Alloc[T](e.ctx, e.c, n)
		if err != nil {
			free()
			return nil, nil, nil, err
		}
		bufs[i], frees = s.Slice(), append(frees, s.Free)
	}
	return bufs[0], bufs[1], free, nil
}

// patterns holds, per rank, one period of its known inputs as T, so that
// filling and checking are table look-ups, not conversions per element.
type patterns[T comm.Element] struct {
	period int
	in     [][]T // in[rank][k]: the input at every index i with i%period == k
	red    []T   // red[k]: the reduction over ranks of in[*][k]
	poison [][]T // poison[rank][k] != in[rank][k]
	redPo  []T   // redPo[k] != red[k]
	// tol is how far a float sum or average may stray from red, when on
	// many ranks it outgrows T's mantissa: the library may add in any
	// order, and each addition rounds.
	tol []float64
}

func newPatterns[T comm.Element](reduces bool, op comm.Op, n int) *patterns[T] {
	pt := &patterns[T]{period: movePeriod}
	input := func(rank, i int) float64 { return moveInput(rank, i) }
	if reduces {
		pt.period = reducePeriod(n)
		input = func(rank, i int) float64 { return reduceInput(op, n, rank, i) }
	}
	pt.in, pt.poison = make([][]T, n), make([][]T, n)
	for r := range n {
		pt.in[r], pt.poison[r] = make([]T, pt.period), make([]T, pt.period)
		for k := range pt.period {
			v := input(r, k)
			pt.in[r][k], pt.poison[r][k] = fromF64[T](v), fromF64[T](v+1)
		}
	}
	if !reduces {
		return pt
	}
	pt.red, pt.redPo, pt.tol = make([]T, pt.period), make([]T, pt.period), make([]float64, pt.period)
	vals := make([]T, n)
	for k := range pt.period {
		for r := range n {
			vals[r] = pt.in[r][k]
		}
		pt.red[k] = fold(op, vals)
		pt.redPo[k] = fromF64[T](toF64(pt.red[k]) + 1)
		if pt.redPo[k] == pt.red[k] { // +1 lost to rounding
			pt.redPo[k] = fromF64[T](-toF64(pt.red[k]) - 1)
		}
		if op == comm.Sum || op == comm.Avg {
			pt.tol[k] = float64(n) * epsilon[T]() * math.Abs(toF64(pt.red[k]))
		}
	}
	return pt
}

func (pt *patterns[T]) fillInput(buf []T, rank int) {
	in := pt.in[rank]
	for i := 0; i < len(buf); i += pt.period {
		copy(buf[i:], in)
	}
}

func (pt *patterns[T]) fillPoison(buf []T, src func(int) origin) {
	for i := range buf {
		o := src(i)
		switch o.rank {
		case unchecked:
		case reduced:
			buf[i] = pt.redPo[o.index%pt.period]
		default:
			buf[i] = pt.poison[o.rank][o.index%pt.period]
		}
	}
}

func (pt *patterns[T]) countWrong(res []T, src func(int) origin) int64 {
	var wrong int64
	for i, got := range res {
		o := src(i)
		k := o.index % pt.period
		switch o.rank {
		case unchecked:
		case reduced:
			if want := pt.red[k]; got != want && !(math.Abs(toF64(got)-toF64(want)) <= pt.tol[k]) {
				wrong++
			}
		default:
			if got != pt.in[o.rank][k] {
				wrong++
			}
		}
	}
	return wrong
}
