package comm

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gocoll/gocoll/internal/wiring"
)

// DefaultBucketBytes is a Bucketer's bucket size when none is given: big
// enough that a bucket's allreduce is bandwidth-bound, small enough that
// the first goes out early in the backward pass (PyTorch's DDP uses 25 MB
// on GPUs; a CPU rank computes slower, so less suffices).
const DefaultBucketBytes = 1 << 20

// A Bucketer averages gradients across ranks while the backward pass goes
// on, as PyTorch's DDP reducer does: the program registers its gradient
// tensors once, in the order the backward pass makes them (the last layer
// first), marks each ready as soon as it is computed, and calls Wait
// before the optimizer step. Consecutive tensors are grouped into buckets
// of about BucketBytes; a bucket goes out, as one AllReduceManyAsync, once
// all its tensors are ready and every bucket before it has gone, so every
// rank issues the same calls in the same order whatever order its own
// tensors were marked in. After Wait, every tensor holds the average (or, with Sum, the sum)
// of the ranks' tensors.
//
// The result is that of one AllReduceMany of all the tensors, bit for bit,
// wherever the algorithm's order of additions does not depend on where an
// element sits in the buffer: on 2 ranks, and with recursive doubling
// (GOCOLL_ALGO=allreduce=rd) on any number. Ring and Rabenseifner on 3 or
// more ranks add an element's contributions in an order that depends on
// its chunk, so the last bits may differ, as between any two bucket
// sizes.
//
// Overlap needs a CPU for the communication while the caller computes.
// An async call runs on its own goroutine; with GOMAXPROCS=1 (what a rank
// that grun binds to one core, --bind-to core or auto, gets) that
// goroutine runs only when the computing one blocks or is preempted (every
// 10 ms or so), so the buckets progress in bursts and a step gains
// little. Give each rank two or more Ps: GOMAXPROCS=2 with one bound core
// lets the kernel run the communication as soon as a message arrives (its
// time on the core is taken from the compute, but the waits for peers
// overlap), and grun --bind-to none, or fewer ranks than cores, gives it a
// core of its own. docs/overlap.md has the measurements.
//
// A Bucketer is for one communicator and one set of tensors; its methods
// may be called from several goroutines. Tensors must not be touched
// between MarkReady and Wait.
type Bucketer[T float32 | float64] struct {
	c  *Communicator
	op Op

	mu       sync.Mutex
	tensors  [][]T
	bucketOf []int   // tensor → its bucket
	buckets  [][]int // bucket → its tensors, in order
	left     []int   // bucket → tensors not yet ready this step
	ready    []bool
	next     int // the first bucket not yet sent this step
	reqs     []*Request
}

// BucketOptions configure a Bucketer.
type BucketOptions struct {
	// BucketBytes is a bucket's size (0: DefaultBucketBytes). A tensor
	// larger than it is a bucket of its own.
	BucketBytes int
	// Sum makes the buckets add the ranks' tensors rather than average
	// them (for a program that scales its loss itself).
	Sum bool
}

// NewBucketer registers tensors, in the order the backward pass makes
// them, and groups them into buckets. Every rank must register tensors
// of the same lengths in the same order with the same options.
func NewBucketer[T float32 | float64](c *Communicator, tensors [][]T, o BucketOptions) (*Bucketer[T], error) {
	if c == nil {
		return nil, errNil("bucketer")
	}
	if len(tensors) == 0 {
		return nil, fmt.Errorf("comm: bucketer: no tensors: %w", ErrInvalid)
	}
	size := o.BucketBytes
	if size == 0 {
		size = DefaultBucketBytes
	}
	if size < 0 {
		return nil, fmt.Errorf("comm: bucketer: bucket size %d bytes: %w", size, ErrInvalid)
	}
	op := Avg
	if o.Sum {
		op = Sum
	}
	if err := checkOp[T]("bucketer", op); err != nil {
		return nil, err
	}
	b := &Bucketer[T]{c: c, op: op, tensors: append([][]T(nil), tensors...), bucketOf: make([]int, len(tensors)), ready: make([]bool, len(tensors))}
	var zero T
	es := int(unsafe.Sizeof(zero))
	fill := 0
	for i, t := range tensors {
		if len(t) == 0 {
			return nil, fmt.Errorf("comm: bucketer: tensor %d is empty: %w", i, ErrInvalid)
		}
		if len(b.buckets) == 0 || fill > 0 && fill+len(t)*es > size {
			b.buckets = append(b.buckets, nil)
			fill = 0
		}
		k := len(b.buckets) - 1
		b.buckets[k] = append(b.buckets[k], i)
		b.bucketOf[i] = k
		fill += len(t) * es
	}
	b.left = make([]int, len(b.buckets))
	b.reset()
	if p := runtime.GOMAXPROCS(0); p == 1 && c.Size() > 1 {
		c.log.Info("bucketer: GOMAXPROCS=1 (one CPU, as grun --bind-to core gives a rank): the buckets progress only when the computing goroutine blocks or is preempted; GOMAXPROCS=2, or grun --bind-to none, lets them overlap the backward pass",
			"buckets", len(b.buckets), "cpus", wiring.CPUList())
	}
	return b, nil
}

// Buckets is how many buckets the tensors make.
func (b *Bucketer[T]) Buckets() int { return len(b.buckets) }

func (b *Bucketer[T]) reset() {
	for k, ts := range b.buckets {
		b.left[k] = len(ts)
	}
	clear(b.ready)
	b.next = 0
	b.reqs = b.reqs[:0]
}

// MarkReady says tensor i (its index in NewBucketer's list) holds this
// step's gradient; the buckets it completes go out. ctx bounds the
// allreduces it starts.
func (b *Bucketer[T]) MarkReady(ctx context.Context, i int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.tensors) {
		return fmt.Errorf("comm: bucketer: tensor %d of %d: %w", i, len(b.tensors), ErrInvalid)
	}
	if b.ready[i] {
		return fmt.Errorf("comm: bucketer: tensor %d marked ready twice in one step (Wait ends a step): %w", i, ErrInvalid)
	}
	b.ready[i] = true
	b.left[b.bucketOf[i]]--
	for b.next < len(b.buckets) && b.left[b.next] == 0 {
		bufs := make([][]T, len(b.buckets[b.next]))
		for j, t := range b.buckets[b.next] {
			bufs[j] = b.tensors[t]
		}
		b.reqs = append(b.reqs, AllReduceManyAsync(ctx, b.c, bufs, b.op))
		b.next++
	}
	return nil
}

// Wait waits for every bucket of the step and ends it: the tensors hold
// the result, and the next step may mark them again. A tensor not marked
// ready is an error of this rank's program, which the other ranks, whose
// buckets went out, cannot see: Wait refuses it in the next call's place,
// so that their call fails naming this rank (ErrMismatch) rather than
// waits, and returns ErrInvalid naming the tensor.
func (b *Bucketer[T]) Wait(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.reset()
	if err := WaitAll(ctx, b.reqs...); err != nil {
		return err
	}
	if b.next < len(b.buckets) {
		missing := -1
		for i, r := range b.ready {
			if !r {
				missing = i
				break
			}
		}
		return b.c.refuse(ctx, "allreduce", fmt.Errorf("comm: bucketer: Wait with tensor %d of %d not marked ready (bucket %d of %d not sent): %w",
			missing, len(b.tensors), b.next, len(b.buckets), ErrInvalid))
	}
	return nil
}
