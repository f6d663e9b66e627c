// Command jobshape is one job of the randomized job-shape test
// (TestJobShapes). Started by grun, every rank runs the same seeded
// sequence of collectives of every kind, element types and sizes that
// cross slot boundaries, checking every result exactly; at call -at, rank
// -culprit injects -fault.
//
// Lines printed, for the test to judge:
//
//	jobshape: fault at T                      (the culprit, as it injects)
//	jobshape: rank R ok C calls               (every call right)
//	jobshape: rank R error at T: S: ERR       (a call failed; S: the sentinels it matches)
//	jobshape: rank R sub error at T: S: ERR   (abort-sub: the sub-communicator's call)
//	jobshape: rank R wrong: WHAT              (a result differs: always a failure)
//
// T is Unix nanoseconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var (
	seed     = flag.Uint64("seed", 1, "seed of the call sequence, the same on every rank")
	calls    = flag.Int("calls", 8, "collectives to run")
	fault    = flag.String("fault", "none", "none, mismatch-kind, mismatch-count, mismatch-dtype, mismatch-op, mismatch-root, cancel, abort-sub, refuse, kill, kill-split, stop, close, exit0")
	culprit  = flag.Int("culprit", 0, "rank that injects the fault")
	at       = flag.Int("at", 3, "index of the call the fault hits")
	deadline = flag.Duration("deadline", 5*time.Second, "context deadline of the calls from -at on (stop: how long the others wait)")
)

func main() {
	flag.Parse()
	ctx := context.Background()
	c, err := comm.Init(ctx)
	if err != nil {
		fmt.Printf("jobshape: rank %s error at %d: %s: %v\n", os.Getenv("GRUN_RANK"), time.Now().UnixNano(), sentinels(err), err)
		os.Exit(1)
	}
	code := run(ctx, c)
	// Close compares the last calls (a mismatched last broadcast can
	// pass on every rank): its error is the job's too.
	if err := c.Close(); err != nil && code == 0 {
		fmt.Printf("jobshape: rank %d error at %d: %s: %v\n", c.Rank(), time.Now().UnixNano(), sentinels(err), err)
		code = 1
	}
	if code == 0 {
		fmt.Printf("jobshape: rank %d ok %d calls\n", c.Rank(), *calls)
	}
	os.Exit(code)
}

func run(ctx context.Context, c *comm.Communicator) int {
	me := c.Rank()
	var sub *comm.Communicator
	if *fault == "abort-sub" {
		var err error
		if sub, err = c.Split(ctx, 0, me); err != nil {
			fmt.Printf("jobshape: rank %d error at %d: %s: %v\n", me, time.Now().UnixNano(), sentinels(err), err)
			return 1
		}
		defer sub.Close()
	}
	if *fault == "kill-split" {
		// Sub-communicators in use beside the job's: each call below is
		// followed by an allreduce on the rank's half of the job.
		var err error
		if sub, err = c.Split(ctx, me%2, me); err != nil {
			fmt.Printf("jobshape: rank %d error at %d: %s: %v\n", me, time.Now().UnixNano(), sentinels(err), err)
			return 1
		}
		defer sub.Close()
	}
	rng := rand.New(rand.NewPCG(*seed, 7))
	for i := range *calls {
		k := pick(rng, c.Size())
		f := "none"
		if i == *at {
			f = *fault
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if i >= *at && *fault != "none" {
			cctx, cancel = context.WithTimeout(ctx, *deadline)
		}
		err := k.run(cctx, c, sub, f, me == *culprit)
		if err == nil && *fault == "kill-split" {
			if f == "kill-split" && me == *culprit {
				// Dead while the others are in their sub-communicators'
				// call: the members of its half see it go, the others
				// only through the job's communicator.
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Second)
			}
			err = subCall(cctx, sub)
		}
		cancel()
		var w wrong
		switch {
		case errors.As(err, &w):
			fmt.Printf("jobshape: rank %d wrong: %v\n", me, err)
			return 1
		case err != nil:
			fmt.Printf("jobshape: rank %d error at %d: %s: %v\n", me, time.Now().UnixNano(), sentinels(err), err)
			return 1
		}
	}
	return 0
}

// subCall is an allreduce on sub, its result checked.
func subCall(ctx context.Context, sub *comm.Communicator) error {
	buf := []int64{1, int64(sub.Rank())}
	if err := comm.AllReduce(ctx, sub, buf, comm.Sum); err != nil {
		return err
	}
	if n := int64(sub.Size()); buf[0] != n || buf[1] != n*(n-1)/2 {
		return wrong{fmt.Sprintf("sub-communicator allreduce: got %v, want [%d %d]", buf, n, n*(n-1)/2)}
	}
	return nil
}

// sentinels lists the documented sentinels err matches.
func sentinels(err error) string {
	var s []string
	for _, e := range []struct {
		name string
		err  error
	}{
		{"mismatch", comm.ErrMismatch}, {"peerlost", comm.ErrPeerLost}, {"timeout", comm.ErrTimeout},
		{"aborted", comm.ErrAborted}, {"canceled", context.Canceled}, {"invalid", comm.ErrInvalid},
		{"broken", comm.ErrBroken}, {"closed", comm.ErrClosed}, {"unsupported", comm.ErrUnsupported},
		{"env", comm.ErrEnv},
	} {
		if errors.Is(err, e.err) {
			s = append(s, e.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// wrong is a result that differs from the expected one.
type wrong struct{ what string }

func (w wrong) Error() string { return w.what }

// call is one collective of the sequence: what every rank draws from the
// shared seed.
type call struct {
	kind  string
	dtype string
	count int
	root  int
	op    comm.Op
}

var kinds = []string{"allreduce", "broadcast", "reduce", "gather", "scatter", "allgather", "allgatherv",
	"reducescatter", "reducescatterv", "alltoall", "alltoallv", "barrier", "sendrecv"}

// Counts that fit a message, and that cross the 256 KiB shared-memory
// and 512 KiB TCP slots at 4 bytes an element (65520 fit one shm slot).
var counts = []int{1, 7, 1000, 65520, 65521, 70000, 140000}

func pick(rng *rand.Rand, n int) call {
	k := call{
		kind:  kinds[rng.IntN(len(kinds))],
		dtype: []string{"int32", "uint32", "float32", "float64", "int64"}[rng.IntN(5)],
		count: counts[rng.IntN(len(counts))],
		root:  rng.IntN(n),
		op:    []comm.Op{comm.Sum, comm.Max, comm.Min}[rng.IntN(3)],
	}
	if k.dtype == "float64" || k.dtype == "int64" {
		k.count = min(k.count, 70000) // the same bytes as the largest 4-byte count
	}
	return k
}

func (k call) run(ctx context.Context, c, sub *comm.Communicator, f string, guilty bool) error {
	// The collective the fault hits, the same on every rank.
	switch f {
	case "mismatch-count", "mismatch-dtype", "mismatch-op", "cancel", "kill", "kill-split", "stop":
		k.kind = "allreduce"
	case "mismatch-root":
		k.kind = []string{"broadcast", "reduce", "gather", "scatter"}[k.root%4]
	case "refuse":
		k.kind, k.root = "gather", *culprit // refused at the root
	}
	// What the culprit calls instead.
	if guilty {
		switch f {
		case "mismatch-kind":
			if k.kind == "barrier" {
				k.kind = "allreduce"
			} else {
				k.kind = "barrier"
			}
		case "mismatch-count":
			k.count++
		case "mismatch-dtype":
			if k.dtype == "int32" {
				k.dtype = "float32"
			} else {
				k.dtype = "int32"
			}
		case "mismatch-op":
			if k.op == comm.Sum {
				k.op = comm.Max
			} else {
				k.op = comm.Sum
			}
		case "mismatch-root":
			k.root = (k.root + 1) % c.Size()
		}
	}
	if f != "none" && guilty {
		fmt.Printf("jobshape: fault at %d\n", time.Now().UnixNano())
	}
	switch {
	case f == "cancel" && guilty:
		// Cancelled while it waits inside the call: the others come late.
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, cancel)
		ctx = cctx
	case f == "cancel":
		time.Sleep(100 * time.Millisecond)
	case f == "kill" && guilty:
		// Dead before it joins the call the others are in (a timer
		// inside the call could fire after a small call had finished,
		// leaving nobody waiting): chaos kills at random moments.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Second)
	case f == "stop" && guilty:
		// Sent to the process, the signal stops it only once the thread
		// the kernel gave it is scheduled, and this goroutine, on another
		// thread, could run the call below first (a small allreduce takes
		// microseconds): sent to this thread, it is taken on the way out
		// of the system call.
		runtime.LockOSThread()
		syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
		runtime.UnlockOSThread()
	case f == "close" && guilty:
		// Closes while the others go on to this call, and exits 0, as a
		// program that ignores Close's error would.
		err := c.Close()
		fmt.Printf("jobshape: rank %d closed at %d: %s: %v\n", c.Rank(), time.Now().UnixNano(), sentinels(err), err)
		os.Exit(0)
	case f == "close":
		k.kind = "allreduce"
	case f == "exit0" && guilty:
		os.Exit(0) // without Close, as log.Fatal's deferred Close never runs
	case f == "exit0":
		k.kind = "allreduce"
	case f == "abort-sub":
		if guilty {
			sub.Abort(errors.New("jobshape: abort-sub"))
		}
		err := comm.AllReduce(ctx, sub, make([]int32, 1000), comm.Sum)
		fmt.Printf("jobshape: rank %d sub error at %d: %s: %v\n", c.Rank(), time.Now().UnixNano(), sentinels(err), err)
		ctx = context.Background() // the parent goes on
	}
	refuse := f == "refuse" && guilty
	switch k.dtype {
	case "int32":
		return runT[int32](ctx, c, k, refuse)
	case "uint32":
		return runT[uint32](ctx, c, k, refuse)
	case "float32":
		return runT[float32](ctx, c, k, refuse)
	case "float64":
		return runT[float64](ctx, c, k, refuse)
	default:
		return runT[int64](ctx, c, k, refuse)
	}
}

type number interface {
	int32 | uint32 | float32 | float64 | int64
}

// val is what rank r puts at index i of the block meant for rank d: small
// integers, so that every sum of up to 8 ranks is exact in every type.
func val[T number](r, d, i int) T { return T((r*131 + d*17 + i) % 1000) }

func block[T number](r, d, count int) []T {
	b := make([]T, count)
	for i := range b {
		b[i] = val[T](r, d, i)
	}
	return b
}

func check[T number](what string, got []T, want func(i int) T) error {
	for i, g := range got {
		if w := want(i); g != w {
			return wrong{fmt.Sprintf("%s: element %d of %d is %v, want %v", what, i, len(got), g, w)}
		}
	}
	return nil
}

func reduced[T number](op comm.Op, n int, at func(q int) T) T {
	acc := at(0)
	for q := 1; q < n; q++ {
		v := at(q)
		switch op {
		case comm.Sum:
			acc += v
		case comm.Max:
			acc = max(acc, v)
		case comm.Min:
			acc = min(acc, v)
		}
	}
	return acc
}

func runT[T number](ctx context.Context, c *comm.Communicator, k call, refuse bool) error {
	r, n, count := c.Rank(), c.Size(), k.count
	own := block[T](r, 0, count)
	all := func(i int) T { return reduced(k.op, n, func(q int) T { return val[T](q, 0, i) }) }
	// blocks: block d meant for rank d.
	blocks := make([]T, 0, n*count)
	for d := range n {
		blocks = append(blocks, block[T](r, d, count)...)
	}
	vc := make([]int, n)
	offs := make([]int, n+1)
	for q := range n {
		vc[q] = count + q
		offs[q+1] = offs[q] + vc[q]
	}
	switch k.kind {
	case "allreduce":
		if err := comm.AllReduce(ctx, c, own, k.op); err != nil {
			return err
		}
		return check("allreduce", own, all)
	case "broadcast":
		buf := make([]T, count)
		if r == k.root {
			copy(buf, own)
		}
		if err := comm.Broadcast(ctx, c, buf, k.root); err != nil {
			return err
		}
		return check("broadcast", buf, func(i int) T { return val[T](k.root, 0, i) })
	case "reduce":
		recv := make([]T, count)
		if err := comm.Reduce(ctx, c, own, recv, k.op, k.root); err != nil {
			return err
		}
		if r != k.root {
			return nil
		}
		return check("reduce", recv, all)
	case "gather":
		recv := make([]T, n*count)
		if refuse {
			recv = recv[:count] // at the root, too short
		}
		if err := comm.Gather(ctx, c, own, recv, k.root); err != nil {
			return err
		}
		if r != k.root {
			return nil
		}
		return check("gather", recv, func(i int) T { return val[T](i/count, 0, i%count) })
	case "scatter":
		recv := make([]T, count)
		if err := comm.Scatter(ctx, c, blocks, recv, k.root); err != nil {
			return err
		}
		return check("scatter", recv, func(i int) T { return val[T](k.root, r, i) })
	case "allgather":
		recv := make([]T, n*count)
		if err := comm.AllGather(ctx, c, own, recv); err != nil {
			return err
		}
		return check("allgather", recv, func(i int) T { return val[T](i/count, 0, i%count) })
	case "allgatherv":
		recv := make([]T, offs[n])
		if err := comm.AllGatherV(ctx, c, block[T](r, 0, vc[r]), recv, vc); err != nil {
			return err
		}
		for q := range n {
			if err := check(fmt.Sprintf("allgatherv block %d", q), recv[offs[q]:offs[q+1]], func(i int) T { return val[T](q, 0, i) }); err != nil {
				return err
			}
		}
		return nil
	case "reducescatter":
		recv := make([]T, count)
		if err := comm.ReduceScatter(ctx, c, blocks, recv, k.op); err != nil {
			return err
		}
		return check("reducescatter", recv, func(i int) T { return reduced(k.op, n, func(q int) T { return val[T](q, r, i) }) })
	case "reducescatterv":
		send := make([]T, 0, offs[n])
		for d := range n {
			send = append(send, block[T](r, d, vc[d])...)
		}
		recv := make([]T, vc[r])
		if err := comm.ReduceScatterV(ctx, c, send, recv, vc, k.op); err != nil {
			return err
		}
		return check("reducescatterv", recv, func(i int) T { return reduced(k.op, n, func(q int) T { return val[T](q, r, i) }) })
	case "alltoall":
		recv := make([]T, n*count)
		if err := comm.AllToAll(ctx, c, blocks, recv); err != nil {
			return err
		}
		return check("alltoall", recv, func(i int) T { return val[T](i/count, r, i%count) })
	case "alltoallv":
		// Rank q sends count+q elements to every rank.
		send := make([]T, 0, n*vc[r])
		sendCounts := make([]int, n)
		for d := range n {
			send = append(send, block[T](r, d, vc[r])...)
			sendCounts[d] = vc[r]
		}
		recv := make([]T, offs[n])
		if err := comm.AllToAllV(ctx, c, send, sendCounts, recv, vc); err != nil {
			return err
		}
		for q := range n {
			if err := check(fmt.Sprintf("alltoallv from %d", q), recv[offs[q]:offs[q+1]], func(i int) T { return val[T](q, r, i) }); err != nil {
				return err
			}
		}
		return nil
	case "barrier":
		return c.Barrier(ctx)
	default: // sendrecv around the ring
		recv := make([]T, count)
		got, err := comm.SendRecv(ctx, c, own, (r+1)%n, 3, recv, (r+n-1)%n, 3)
		if err != nil {
			return err
		}
		if got != count {
			return wrong{fmt.Sprintf("sendrecv: %d elements, want %d", got, count)}
		}
		return check("sendrecv", recv, func(i int) T { return val[T]((r+n-1)%n, 0, i) })
	}
}
