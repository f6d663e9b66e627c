package collectives

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// Options configure a Group.
type Options struct {
	// Algos forces an algorithm per collective (see ParseAlgos).
	Algos map[Kind]Algo
	// SmallAllReduce is the largest allreduce, in bytes, that runs a
	// latency-bound algorithm (recursive doubling or tree) rather than a
	// bandwidth-bound one (ring or Rabenseifner); default 64 KiB. See
	// rules (choose.go) for the rest of the table.
	SmallAllReduce int
	// SmallAllReducePow2, if set, takes SmallAllReduce's place on a
	// power-of-two number of ranks from four (see rules, choose.go).
	SmallAllReducePow2 int
	// RingChunk is the smallest share of an allreduce, in bytes per rank,
	// that the ring runs on three or four ranks; below it Rabenseifner,
	// whose 2log2(n) steps beat the ring's 2(n-1) where each step costs
	// more than its bytes (see rules, choose.go). 0: no floor.
	RingChunk int
	// SingleCopyMin is the smallest allreduce, in bytes, of a buffer
	// every rank reads (SingleCopyAllReduce, SingleCopyAllReduceRead)
	// that takes the single copy; a smaller one runs the table's other rows, whose
	// one exchange beats the single copy's three rounds of messages
	// (see rules, choose.go). 0: no floor.
	SingleCopyMin int
	// SingleCopyReadRanks is the most ranks on which the single copy
	// takes buffers it reads through a PeerReader
	// (SingleCopyAllReduceRead) rather than maps. 0: no limit.
	SingleCopyReadRanks int
	// SmallBroadcast is the largest broadcast that uses the binomial tree
	// rather than the chain (default 64 KiB).
	SmallBroadcast int
	// HierSegment is the bytes of one stage of the pipelined
	// hierarchical allreduce (HierPipe), which runs from two stages on
	// (see rules, choose.go); default 1 MiB. Every rank must give the
	// same: comm takes it from the job's plan.
	HierSegment int
	// Hosts maps each rank to its host (any ids, equal for ranks that
	// share a host). With several hosts and several ranks on one of them,
	// allreduce runs Hier unless overridden. Nil means one host.
	Hosts []int
	// Logger receives the algorithm choices (info, once per choice) and
	// per-call detail (debug). Nil means silent.
	Logger *slog.Logger
	// Recorded is how many of its last calls the group's flight recorder
	// keeps (rounded up to a power of two; default DefaultRecorded).
	Recorded int
	// Timed makes the recorder read the clock at the start and end of
	// every call (two reads, ~45 ns), for a trace; otherwise it keeps
	// the calls alone and the communicator's watchdog their times, to
	// its tick.
	Timed bool
	// Round16 reduces Float16 and BFloat16 Sum, Avg and Prod in 16 bits,
	// every partial result rounded back, instead of
	// keeping partial results in float32 and rounding once (wide.go):
	// less accurate, and from three ranks on faster. Calls say which in
	// their header, so ranks that disagree get ErrMismatch.
	Round16 bool
	// Traffic, if set, counts the bytes the group's calls move through
	// memory (see Traffic); nil counts nothing and costs nothing.
	Traffic *Traffic
}

// Group runs collectives over one transport: the algorithms' view of a
// communicator. Calls on a Group must not overlap; the communicator
// serialises them (every rank must issue collectives in the same order).
type Group struct {
	t    transport.Transport
	opts Options
	seq  uint64
	// sentSeq[p] and gotSeq[p] are the sequence number of the last call in
	// which the header went to / came from peer p.
	sentSeq, gotSeq []uint64
	small           []byte // header + small payload scratch
	cur             call   // the call in progress (see newCall)
	// rec is the flight recorder (recorder.go): the last calls, for the
	// watchdog and the stall report on other goroutines; cur itself
	// belongs to the call's goroutine.
	rec recorder

	logMu  sync.Mutex
	logged map[decision]bool

	hier bool // Options.Hosts calls for the hierarchical allreduce
	n    int  // t.Size() and t.Rank(), asked once
	rank int
	// Read once at NewGroup, as every call needs them: a map lookup and
	// the logger's level cost a small allreduce more than its arithmetic.
	forced  [kindLimit]Algo // Options.Algos by kind
	logInfo bool            // Logger is on at info level
	last    lastChoice      // decide's last (choose.go)
}

// kindLimit bounds the Kind values, for arrays indexed by kind.
const kindLimit = 16

// NewGroup builds a Group over t.
func NewGroup(t transport.Transport, opts Options) *Group {
	if opts.SmallAllReduce == 0 {
		opts.SmallAllReduce = 64 << 10
	}
	if opts.SmallBroadcast == 0 {
		opts.SmallBroadcast = 64 << 10
	}
	if opts.HierSegment == 0 {
		opts.HierSegment = 1 << 20
	}
	_, _, hier := hierarchical(opts.Hosts, t.Size())
	g := &Group{
		hier:    hier,
		n:       t.Size(),
		rank:    t.Rank(),
		t:       t,
		opts:    opts,
		sentSeq: make([]uint64, t.Size()),
		gotSeq:  make([]uint64, t.Size()),
		small:   make([]byte, hdrLen+combineMax),
		logged:  make(map[decision]bool),
		logInfo: opts.Logger != nil && opts.Logger.Enabled(context.Background(), slog.LevelInfo),
	}
	g.rec = newRecorder(opts.Recorded, opts.Timed)
	g.cur = call{g: g, t: t, segMax: segment(t.MaxMessage()), tally: opts.Traffic}
	g.cur.ch, _ = t.(*Channel)
	for k, a := range opts.Algos {
		if k < kindLimit {
			g.forced[k] = a
		}
	}
	return g
}

// Rank is this rank. Size is the number of ranks.
func (g *Group) Rank() int { return g.t.Rank() }

// Size is the number of ranks.
func (g *Group) Size() int { return g.t.Size() }

// checkLen returns the number of dt elements in b, or an error if b does
// not hold a whole number of them.
func checkLen(what string, b []byte, dt reduce.DType) (int, error) {
	count, whole := dt.Count(len(b))
	if !whole {
		return 0, lenError(what, b, dt)
	}
	return count, nil
}

// lenError is checkLen's error, out of line, so that the frame of its
// callers is sized for the check that passes.
//
//go:noinline
func lenError(what string, b []byte, dt reduce.DType) error {
	if !dt.Valid() {
		return fmt.Errorf("%s: invalid element type %v", what, dt)
	}
	return fmt.Errorf("%s: %d bytes is not a whole number of %v elements", what, len(b), dt)
}

// Options are the options g was built with, for groups split from it.
func (g *Group) Options() Options { return g.opts }

// segment is the payload of one message of a call over a transport whose
// messages carry max bytes: what the call header leaves, to a cache line.
func segment(max int) int { return (max - hdrLen) &^ 63 }

// Segment is the payload of one message of a call over a Mux whose
// transport's messages carry max bytes (a Channel's MaxMessage is max
// less MuxHeader): the length in which calls cut long buffers, so that a
// job that sizes its pieces in messages can size them in these.
func Segment(max int) int { return segment(max - MuxHeader) }
