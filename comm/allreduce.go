package comm

import (
	"context"
	"fmt"
	"sort"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

// AllReduce combines buf element-wise across all ranks with op, in place:
// on return every rank's buf holds the same bytes. Every rank must pass the
// same length and op.
func AllReduce[T Element](ctx context.Context, c *Communicator, buf []T, op Op) error {
	if c == nil {
		return errNil("allreduce")
	}
	return c.allReduce(ctx, bytesOf(buf), dtypeOf[T](), op)
}

// allReduce is AllReduce past its type parameter: what every element
// type shares is compiled once, without a generic dictionary to consult.
func (c *Communicator) allReduce(ctx context.Context, b []byte, dt reduce.DType, op Op) error {
	if err := checkDTypeOp("allreduce", dt, op); err != nil {
		return c.refuse(ctx, "allreduce", err)
	}
	if c.win.count.Load() != 0 {
		if err := c.freedError("allreduce", b); err != nil {
			return c.refuse(ctx, "allreduce", err)
		}
	}
	// Not allReduceJob's closure: one returned from a function is
	// allocated on every call.
	return c.run(ctx, "allreduce", func(ctx context.Context) error { return c.groupAllReduce(ctx, b, dt, reduce.Op(op)) })
}

// AllReduceAsync is AllReduce, issued now and finished in the background.
func AllReduceAsync[T Element](ctx context.Context, c *Communicator, buf []T, op Op) *Request {
	return c.start(ctx, allReduceJob(c, buf, op))
}

func allReduceJob[T Element](c *Communicator, buf []T, op Op) job {
	if err := checkAllReduce[T](c, op); err != nil {
		return job{err: err}
	}
	if err := c.freedError("allreduce", bytesOf(buf)); err != nil {
		return job{err: err}
	}
	return job{what: "allreduce", f: func(ctx context.Context) error { return allReduce(ctx, c, buf, op) }}
}

func checkAllReduce[T Element](c *Communicator, op Op) error {
	if c == nil {
		return errNil("allreduce")
	}
	return checkOp[T]("allreduce", op)
}

func allReduce[T Element](ctx context.Context, c *Communicator, buf []T, op Op) error {
	return c.groupAllReduce(ctx, bytesOf(buf), dtypeOf[T](), reduce.Op(op))
}

// AllReduceMany allreduces every buffer of bufs with op as one collective:
// the buffers are packed into one, reduced together, and unpacked, so k
// small allreduces cost one round of messages instead of k (gradient
// bucketing). Every rank passes the same number of buffers with the same
// lengths: the first call with a layout checks that (two small
// allreduces), and a rank whose layout differs makes every rank fail with
// ErrMismatch naming the first buffer that differs and its lengths. The
// buffers must not overlap one another.
func AllReduceMany[T Element](ctx context.Context, c *Communicator, bufs [][]T, op Op) error {
	return c.do(ctx, allReduceManyJob(c, bufs, op))
}

// AllReduceValues allreduces a few scalars with op in one collective, each
// in place: the loss, the token count and the correct answers of a step,
// say, without packing them into a slice by hand. They share a type:
// counts reduce exactly as float64 up to 2^53.
//
//	err := comm.AllReduceValues(ctx, c, comm.Sum, &loss, &tokens, &correct)
func AllReduceValues[T Element](ctx context.Context, c *Communicator, op Op, vals ...*T) error {
	buf := make([]T, len(vals))
	for i, v := range vals {
		if v == nil {
			return c.refuse(ctx, "allreduce", fmt.Errorf("comm: allreduce: value %d is a nil pointer: %w", i, ErrInvalid))
		}
		buf[i] = *v
	}
	if err := AllReduce(ctx, c, buf, op); err != nil {
		return err
	}
	for i, v := range vals {
		*v = buf[i]
	}
	return nil
}

// AllReduceManyAsync is AllReduceMany, issued now and finished in the
// background.
func AllReduceManyAsync[T Element](ctx context.Context, c *Communicator, bufs [][]T, op Op) *Request {
	return c.start(ctx, allReduceManyJob(c, bufs, op))
}

func allReduceManyJob[T Element](c *Communicator, bufs [][]T, op Op) job {
	const what = "allreduce" // one name per kind of call, as Stats and traces count it
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	type span struct{ lo, hi uintptr }
	spans := make([]span, 0, len(bufs))
	total := 0
	for _, b := range bufs {
		total += len(b)
		if len(b) > 0 {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			spans = append(spans, span{lo, lo + uintptr(len(b))*unsafe.Sizeof(b[0])})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return job{err: fmt.Errorf("comm: allreducemany: two of the %d buffers overlap: %w", len(bufs), ErrInvalid)}
		}
	}
	bufs = append([][]T(nil), bufs...)
	lens := make([]int, len(bufs))
	for i, b := range bufs {
		lens[i] = len(b)
	}
	return job{what: what, f: func(ctx context.Context) error {
		if err := c.checkShape(ctx, dtypeOf[T](), lens); err != nil {
			return err
		}
		packed := make([]T, 0, total)
		for _, b := range bufs {
			packed = append(packed, b...)
		}
		if err := c.g.AllReduce(ctx, bytesOf(packed), dtypeOf[T](), reduce.Op(op)); err != nil {
			return err
		}
		off := 0
		for _, b := range bufs {
			off += copy(b, packed[off:])
		}
		return nil
	}}
}
