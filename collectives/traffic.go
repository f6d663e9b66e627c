package collectives

import (
	"sync/atomic"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Traffic counts the bytes a Group's calls move through memory, for a
// model of a collective's cost that does not depend on the machine it
// runs on (docs/traffic.md): what the calls hand to the transport, what
// their reductions read and write, and what they copy themselves (data
// landing from a receive slot, a rank's own block). The zero value is
// ready; a Group counts into it when Options.Traffic points at it, and
// several Groups may share one. Reading it while calls run is safe.
type Traffic struct {
	sent, reduceRead, reduceWritten, copied atomic.Int64
}

// TrafficCounts is what a Traffic counted.
type TrafficCounts struct {
	// Sent is the payload handed to the transport (call headers left
	// out). Over shared memory the sender copies each byte once, into the
	// ring, and receivers reduce or copy it from there in place: a sent
	// byte is read once and written once. (Over TCP the kernel makes
	// those copies, one on each side.)
	Sent int64
	// ReduceRead and ReduceWritten are the bytes the reductions read
	// (every operand: two, or the single copy's n) and wrote; with 16-bit data summed in float32,
	// the float32 partials count at their size.
	ReduceRead, ReduceWritten int64
	// Copied is the bytes the calls copied (each read once and written
	// once): received data landing where it belongs, and a rank's own
	// block moved from send to receive buffer.
	Copied int64
}

// Counts is what t counted so far.
func (t *Traffic) Counts() TrafficCounts {
	return TrafficCounts{Sent: t.sent.Load(), ReduceRead: t.reduceRead.Load(), ReduceWritten: t.reduceWritten.Load(), Copied: t.copied.Load()}
}

// Moved is the memory traffic the counts stand for over shared memory:
// every byte read or written, by the transport's copy of what was sent,
// the reductions and the calls' own copies.
func (c TrafficCounts) Moved() int64 {
	return 2*c.Sent + c.ReduceRead + c.ReduceWritten + 2*c.Copied
}

// The methods below take a nil Traffic, which counts nothing: the
// branch is all a Group without Options.Traffic pays.

func (t *Traffic) sending(n int) {
	if t != nil {
		t.sent.Add(int64(n))
	}
}

func (t *Traffic) reduced(read, written int) {
	if t != nil {
		t.reduceRead.Add(int64(read))
		t.reduceWritten.Add(int64(written))
	}
}

func (t *Traffic) copying(n int) {
	if t != nil {
		t.copied.Add(int64(n))
	}
}

// reduce is reduce.Reduce, counted.
func (c *call) reduce(dt reduce.DType, op reduce.Op, dst, a, b []byte) {
	reduce.Reduce(dt, op, dst, a, b)
	c.tally.reduced(len(a)+len(b), len(dst))
}

// reduceN is reduce.ReduceN, or reduce.ReduceNWide if wide (Avg's
// division included), counted: every input read once, dst written once
// (the float32 partials of ReduceNWide stay in a scratch piece in cache,
// as ReduceN's of the types without a register kernel do).
func (c *call) reduceN(wide bool, dt reduce.DType, op reduce.Op, dst []byte, ins [][]byte) {
	if wide {
		reduce.ReduceNWide(dt, op, dst, ins)
	} else {
		reduce.ReduceN(dt, op, dst, ins)
	}
	c.tally.reduced(len(ins)*len(dst), len(dst))
}

// copy is the built-in copy, counted.
func (c *call) copy(dst, src []byte) {
	c.tally.copying(copy(dst, src))
}
