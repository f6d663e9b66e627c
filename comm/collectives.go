package comm

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Float16 is an IEEE 754 half-precision number, stored in its 16 bits.
// Reductions convert to float32, reduce, and round back to nearest-even.
type Float16 uint16

// Float32 converts h to float32 exactly.
func (h Float16) Float32() float32 { return reduce.F16ToF32(uint16(h)) }

// Float16Of rounds f to the nearest Float16 (ties to even).
func Float16Of(f float32) Float16 { return Float16(reduce.F32ToF16(f)) }

// BFloat16 is a bfloat16 number (the top half of a float32), stored in its
// 16 bits. Reductions convert to float32, reduce, and round back to
// nearest-even.
type BFloat16 uint16

// Float32 converts b to float32 exactly.
func (b BFloat16) Float32() float32 { return reduce.BF16ToF32(uint16(b)) }

// BFloat16Of rounds f to the nearest BFloat16 (ties to even).
func BFloat16Of(f float32) BFloat16 { return BFloat16(reduce.F32ToBF16(f)) }

// Element lists the types the collectives carry. The types are exact
// (no ~): a program with its own named float type converts its slice.
type Element interface {
	float32 | float64 | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | Float16 | BFloat16
}

// Op is a reduction operation.
type Op uint8

const (
	// Sum adds. Integers wrap around on overflow, as Go's + does.
	Sum = Op(reduce.Sum)
	// Prod multiplies. Integers wrap around on overflow.
	Prod = Op(reduce.Prod)
	// Min keeps the smallest; for floats, NaN if any input is NaN, and -0 < +0.
	Min = Op(reduce.Min)
	// Max keeps the largest; for floats, NaN if any input is NaN, and -0 < +0.
	Max = Op(reduce.Max)
	// Avg is Sum divided by the number of ranks, for floating-point types
	// only; on integers it returns ErrUnsupported (use Sum and divide, with
	// the rounding your program wants).
	Avg = Op(reduce.Avg)
)

func (o Op) String() string { return reduce.Op(o).String() }

func dtypeOf[T Element]() reduce.DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return reduce.Float32
	case float64:
		return reduce.Float64
	case int8:
		return reduce.Int8
	case int16:
		return reduce.Int16
	case int32:
		return reduce.Int32
	case int64:
		return reduce.Int64
	case uint8:
		return reduce.Uint8
	case uint16:
		return reduce.Uint16
	case uint32:
		return reduce.Uint32
	case uint64:
		return reduce.Uint64
	case Float16:
		return reduce.Float16
	case BFloat16:
		return reduce.BFloat16
	}
	panic("unreachable: Element lists every type")
}

// bytesOf is s's memory as bytes, without copying.
func bytesOf[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

func checkOp[T Element](what string, op Op) error { return checkDTypeOp(what, dtypeOf[T](), op) }

// checkDTypeOp is checkOp for a known type. The check that passes is
// a few comparisons; the errors are built out of line, for an 8-byte
// allreduce pays for the frame they would need on every call.
func checkDTypeOp(what string, dt reduce.DType, op Op) error {
	if dt.Valid() && reduce.Op(op).Valid() && (reduce.Op(op) != reduce.Avg || dt.IsFloat()) {
		return nil
	}
	return opError(what, dt, op)
}

//go:noinline
func opError(what string, dt reduce.DType, op Op) error {
	if !reduce.Op(op).Valid() {
		return fmt.Errorf("comm: %s: unknown op %d (want Sum, Prod, Min, Max or Avg): %w", what, op, ErrInvalid)
	}
	if err := reduce.Check(dt, reduce.Op(op)); err != nil {
		return fmt.Errorf("comm: %s: %w: %w", what, ErrUnsupported, err)
	}
	return nil
}

// overlap reports whether a and b share any memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// same reports whether a and b are exactly the same memory.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

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
		return err
	}
	// Not allReduceJob's closure: one returned from a function is
	// allocated on every call, a tenth of a small allreduce's time.
	return c.run(ctx, "allreduce", func(ctx context.Context) error { return c.g.AllReduce(ctx, b, dt, reduce.Op(op)) })
}

// AllReduceAsync is AllReduce, issued now and finished in the background.
func AllReduceAsync[T Element](ctx context.Context, c *Communicator, buf []T, op Op) *Request {
	return c.start(ctx, allReduceJob(c, buf, op))
}

func allReduceJob[T Element](c *Communicator, buf []T, op Op) job {
	if err := checkAllReduce[T](c, op); err != nil {
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
	return c.g.AllReduce(ctx, bytesOf(buf), dtypeOf[T](), reduce.Op(op))
}

// Broadcast copies root's buf into every other rank's buf. Every rank must
// pass the same length and root.
func Broadcast[T Element](ctx context.Context, c *Communicator, buf []T, root int) error {
	return c.do(ctx, broadcastJob(c, buf, root))
}

// BroadcastAsync is Broadcast, issued now and finished in the background.
func BroadcastAsync[T Element](ctx context.Context, c *Communicator, buf []T, root int) *Request {
	return c.start(ctx, broadcastJob(c, buf, root))
}

func broadcastJob[T Element](c *Communicator, buf []T, root int) job {
	if c == nil {
		return job{err: errNil("broadcast")}
	}
	if root < 0 || root >= c.Size() {
		return job{err: fmt.Errorf("comm: broadcast: root %d out of range [0, %d): %w", root, c.Size(), ErrInvalid)}
	}
	return job{what: "broadcast", f: func(ctx context.Context) error {
		return c.g.Broadcast(ctx, bytesOf(buf), dtypeOf[T](), root)
	}}
}

// AllGather concatenates every rank's send, in rank order, into recv on
// every rank: len(recv) must be Size()*len(send). send may be recv's own
// block (recv[Rank()*len(send):][:len(send)]), for an in-place gather;
// any other overlap is refused.
func AllGather[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.do(ctx, allGatherJob(c, send, recv))
}

// AllGatherAsync is AllGather, issued now and finished in the background.
func AllGatherAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.start(ctx, allGatherJob(c, send, recv))
}

func allGatherJob[T Element](c *Communicator, send, recv []T) job {
	if c == nil {
		return job{err: errNil("allgather")}
	}
	n := c.Size()
	if len(recv) != n*len(send) {
		return job{err: fmt.Errorf("comm: allgather: len(recv) = %d, want Size() x len(send) = %d x %d: %w", len(recv), n, len(send), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) && !same(s, r[c.Rank()*len(s):(c.Rank()+1)*len(s)]) {
		return job{err: fmt.Errorf("comm: allgather: send overlaps recv other than at this rank's block: %w", ErrInvalid)}
	}
	return job{what: "allgather", f: func(ctx context.Context) error {
		return c.g.AllGather(ctx, s, r, dtypeOf[T]())
	}}
}

// ReduceScatter combines send (Size() blocks of len(recv) elements)
// element-wise across ranks with op and leaves block Rank() of the result
// in recv. recv may be send's own block, for an in-place reduce-scatter;
// any other overlap is refused.
func ReduceScatter[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) error {
	return c.do(ctx, reduceScatterJob(c, send, recv, op))
}

// ReduceScatterAsync is ReduceScatter, issued now and finished in the
// background.
func ReduceScatterAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) *Request {
	return c.start(ctx, reduceScatterJob(c, send, recv, op))
}

func reduceScatterJob[T Element](c *Communicator, send, recv []T, op Op) job {
	if c == nil {
		return job{err: errNil("reducescatter")}
	}
	if err := checkOp[T]("reducescatter", op); err != nil {
		return job{err: err}
	}
	n := c.Size()
	if len(send) != n*len(recv) {
		return job{err: fmt.Errorf("comm: reducescatter: len(send) = %d, want Size() x len(recv) = %d x %d: %w", len(send), n, len(recv), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) && !same(r, s[c.Rank()*len(r):(c.Rank()+1)*len(r)]) {
		return job{err: fmt.Errorf("comm: reducescatter: recv overlaps send other than at this rank's block: %w", ErrInvalid)}
	}
	return job{what: "reducescatter", f: func(ctx context.Context) error {
		return c.g.ReduceScatter(ctx, s, r, dtypeOf[T](), reduce.Op(op))
	}}
}

func errNil(what string) error {
	return fmt.Errorf("comm: %s: nil *Communicator (Init or New failed?): %w", what, ErrInvalid)
}
