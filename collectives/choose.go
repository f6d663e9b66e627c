package collectives

import (
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// The algorithm of a call is a function of the group's options (which
// comm derives from the job's plan, the same on every rank) and of the
// call: its kind, its size, the rank count and whether it reduces 16-bit
// data with float32 partial results (wideFor). rules holds that function
// as rows of (condition, algorithm, why), tried in order; the first
// whose condition holds decides, and the log prints that row's why, so
// the reason logged is the rule that chose.
//
// The reasoning behind the allreduce rows:
//
//   - Small buffers are latency-bound: recursive doubling, log2(n)
//     exchanges of the whole buffer. The tree was as fast at a few KiB,
//     but in a tree a rank hears only from its parent and children, so
//     ranks that called different collectives could wait on each other
//     without a header exchange to report ErrMismatch; recursive
//     doubling's two-way exchanges always do.
//   - Larger buffers are bandwidth-bound: the ring moves 2(n-1)/n of the
//     buffer in 2(n-1) steps, Rabenseifner the same bytes in 2log2(n)
//     steps. The ring wins on few ranks, where its steps are few and
//     each one long; Rabenseifner as n grows.
//   - Where each step costs more than its bytes (Options.RingChunk, from
//     the job's step-cost hint, e.g. TCP's system calls and wake-ups),
//     Rabenseifner's fewer steps win until a ring step carries
//     RingChunk bytes, and on 4, 8, 16... ranks recursive doubling ends
//     sooner (Options.SmallAllReducePow2), where Rabenseifner's halving
//     sends (n-1)/n of the buffer twice against recursive doubling's
//     log2(n) times the whole.
//   - 16-bit sums in float32 (wide.go): from 3 to pairwiseRanks ranks the
//     pairwise reduce-scatter sends each block once, in 16 bits, to its
//     owner, where the wide ring and Rabenseifner send float32 partials;
//     below SmallAllReduce/2 (and on more than pairwiseSmallRanks ranks
//     up to SmallAllReduce) its messages are too short to fill a link,
//     and recursive doubling on a float32 copy stays ahead. Beyond
//     pairwiseRanks every rank would talk to every other at once, which
//     nothing has measured: the float32 table applies.
//   - Across hosts (Options.Hosts, several ranks on some host) the
//     hierarchical allreduce sends each byte between hosts once per
//     host, not once per rank. From two stages of Options.HierSegment
//     (the job's plan) on, it is pipelined: while the leaders exchange
//     stage k, their hosts reduce stage k+1 and broadcast stage k-1,
//     so the phases inside a host hide behind the slower one between
//     hosts instead of adding to it. Below two stages there is
//     nothing to overlap, and the phases run one after another.
//   - A buffer every rank maps (comm.Alloc) or reads (comm.Register) is
//     reduced from the peers' memory, not copied through the rings,
//     from Options.SingleCopyMin (from the job's plan); below it the
//     single copy's three rounds of empty messages per peer cost
//     more than the bytes it saves, and the rows after it decide. It
//     takes 16-bit data with float32 partials too, with the wide
//     ring's bits (reduce.ReduceNWide), so it comes before the rows of
//     the wide path; the rows before it (one rank, an exact sum,
//     GOCOLL_ALGO, ranks on several hosts) come first. The rows after
//     it say, for such a buffer, why it did not take it (notSingle), so
//     the log gives the reason either way.
//
// GOCOLL_ALGO (Options.Algos) overrides every row but a job of one rank
// and an exact sum (exact.go), whose bits must not depend on it.
var rules = [...]rule{
	{anyKind, Local,
		func(g *Group, s shape) bool { return s.n == 1 },
		func(g *Group, s shape) string { return "one rank" }},
	{anyKind, Pairwise,
		func(g *Group, s shape) bool { return s.exact },
		func(g *Group, s shape) string {
			return "exactsum: every block's inputs summed exactly by its owner (GOCOLL_ALGO does not apply)"
		}},
	{anyKind, Auto,
		func(g *Group, s shape) bool { return s.kind < kindLimit && g.forced[s.kind] != Auto },
		func(g *Group, s shape) string { return "forced (GOCOLL_ALGO)" }},
	{AllReduce, HierPipe,
		func(g *Group, s shape) bool {
			return g.hier && g.opts.HierSegment > 0 && s.bytes >= 2*g.opts.HierSegment
		},
		func(g *Group, s shape) string { return hostsPipeWhy(g.opts.Hosts, s.n, s.bytes, g.opts.HierSegment) }},
	{AllReduce, Hier,
		func(g *Group, s shape) bool { return g.hier },
		func(g *Group, s shape) string { return hostsWhy(g.opts.Hosts, s.n) }},
	{AllReduce, SingleCopy,
		func(g *Group, s shape) bool {
			return s.mapped && !s.exact && s.bytes >= g.opts.SingleCopyMin && !g.readTooMany(s)
		},
		func(g *Group, s shape) string {
			why := fmt.Sprintf("%d bytes >= %d in buffers every rank reads (Alloc, Register): no copy through the rings", s.bytes, g.opts.SingleCopyMin)
			if s.wide {
				why += "; 16-bit summed in float32, with the wide ring's bits"
			}
			return why
		}},
	{AllReduce, RecursiveDoubling,
		func(g *Group, s shape) bool {
			small := g.opts.SmallAllReduce
			return pairwiseWide(s) && s.bytes <= small && (s.n > pairwiseSmallRanks || s.bytes < small/2)
		},
		func(g *Group, s shape) string {
			return fmt.Sprintf("16-bit in float32, %d bytes on %d ranks, below the pairwise reduce-scatter's floor: latency-bound", s.bytes, s.n) + notSingle(g, s)
		}},
	{AllReduce, Pairwise,
		func(g *Group, s shape) bool { return pairwiseWide(s) },
		func(g *Group, s shape) string {
			return fmt.Sprintf("16-bit in float32, %d bytes on %d ranks: the pairwise reduce-scatter sends every block once, in 16 bits", s.bytes, s.n) + notSingle(g, s)
		}},
	{AllReduce, RecursiveDoubling,
		func(g *Group, s shape) bool { return s.bytes <= g.smallAllReduce(s.n) },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes <= %d on %d ranks: latency-bound", s.bytes, g.smallAllReduce(s.n), s.n) + notSingle(g, s)
		}},
	{AllReduce, Rabenseifner,
		func(g *Group, s shape) bool { return s.n > 2 && s.bytes/s.n < g.opts.RingChunk },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes on %d ranks: bandwidth-bound, but a ring step would carry %d bytes < %d (the job's links cost per step)",
				s.bytes, s.n, s.bytes/s.n, g.opts.RingChunk) + notSingle(g, s)
		}},
	{AllReduce, Ring,
		func(g *Group, s shape) bool { return s.n <= 3 || s.n == 4 && s.bytes <= 1<<20 },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes on %d ranks: bandwidth-bound, few ranks", s.bytes, s.n) + notSingle(g, s)
		}},
	{AllReduce, Rabenseifner,
		func(g *Group, s shape) bool { return true },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes on %d ranks: bandwidth-bound, many ranks", s.bytes, s.n) + notSingle(g, s)
		}},
	{anyKind, Pairwise,
		func(g *Group, s shape) bool {
			return (s.kind == ReduceScatter || s.kind == ReduceScatterV) && pairwiseWide(s)
		},
		func(g *Group, s shape) string {
			return fmt.Sprintf("16-bit in float32 on %d ranks: the pairwise reduce-scatter sends every block once, in 16 bits", s.n)
		}},
	{Broadcast, Binomial,
		func(g *Group, s shape) bool { return s.bytes <= g.opts.SmallBroadcast || s.n == 2 },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes on %d ranks: latency-bound (or two ranks)", s.bytes, s.n)
		}},
	{Broadcast, Chain,
		func(g *Group, s shape) bool { return true },
		func(g *Group, s shape) string {
			return fmt.Sprintf("%d bytes > %d: bandwidth-bound", s.bytes, g.opts.SmallBroadcast)
		}},
	{anyKind, Auto,
		func(g *Group, s shape) bool { return true },
		func(g *Group, s shape) string { return "the collective's default" }},
}

// anyKind marks a row of rules that serves every kind of call.
const anyKind Kind = 0

// rule is a row of rules: a call of kind (or any) for which when holds
// runs algo (Auto: the one forced, or the collective's default), because
// of why.
type rule struct {
	kind Kind
	algo Algo
	when func(g *Group, s shape) bool
	why  func(g *Group, s shape) string
}

// shape is what the choice depends on besides the group's options.
type shape struct {
	kind     Kind
	n, bytes int
	wide     bool // 16-bit data reduced with float32 partials (wideFor)
	exact    bool // an ExactSum of floats (exactFloat)
	mapped   bool // an allreduce of buffers every rank reads (SingleCopyAllReduce, SingleCopyAllReduceRead)
	read     bool // ... through a PeerReader (SingleCopyAllReduceRead)
}

// notSingle is what the rows after SingleCopy add to their reason for a
// buffer every rank maps: which of that row's conditions failed.
func notSingle(g *Group, s shape) string {
	switch {
	case !s.mapped:
		return ""
	case s.bytes < g.opts.SingleCopyMin:
		return fmt.Sprintf("; not the single copy: %d bytes < its floor %d (the job's plan)", s.bytes, g.opts.SingleCopyMin)
	case g.readTooMany(s):
		return fmt.Sprintf("; not the single copy: it would read the peers' buffers with process_vm_readv, slower than the rings on more than %d ranks (the job's plan)",
			g.opts.SingleCopyReadRanks)
	}
	return ""
}

// readTooMany says whether s reads the peers' buffers through a
// PeerReader on more ranks than Options.SingleCopyReadRanks.
func (g *Group) readTooMany(s shape) bool {
	return s.read && g.opts.SingleCopyReadRanks > 0 && s.n > g.opts.SingleCopyReadRanks
}

// pairwiseRanks is the most ranks on which the wide path runs the
// pairwise reduce-scatter, and pairwiseSmallRanks the most on which it
// does so at the small sizes (see rules).
const pairwiseRanks, pairwiseSmallRanks = 8, 4

func pairwiseWide(s shape) bool { return s.wide && s.n >= 3 && s.n <= pairwiseRanks }

// smallAllReduce is the largest allreduce on n ranks that runs recursive
// doubling: Options.SmallAllReducePow2 on a power of two from 4 where it
// is set, else Options.SmallAllReduce.
func (g *Group) smallAllReduce(n int) int {
	if n >= 4 && n&(n-1) == 0 && g.opts.SmallAllReducePow2 > 0 {
		return g.opts.SmallAllReducePow2
	}
	return g.opts.SmallAllReduce
}

// pick returns the algorithm for a call of shape s and the row of rules
// that chose it.
func (g *Group) pick(s shape) (Algo, int) {
	for i := range rules {
		r := &rules[i]
		if (r.kind == anyKind || r.kind == s.kind) && r.when(g, s) {
			a := r.algo
			if a == Auto {
				if a = g.forced[min(int(s.kind), kindLimit-1)]; a == Auto {
					a = algos[s.kind][0]
				}
			}
			return a, i
		}
	}
	return algos[s.kind][0], len(rules) - 1 // the last row always holds
}

// choose picks the algorithm for a call that reduces nothing in float32
// and says why, once, at info level. It runs on every call, so the pick
// itself builds nothing: the reason is worked out only when it is logged.
func (g *Group) choose(kind Kind, bytes int) Algo {
	return g.decide(shape{kind: kind, n: g.n, bytes: bytes})
}

// chooseReduction is choose for a reduction of bytes of dt under op, and
// whether it takes the float32 path (wideFor).
func (g *Group) chooseReduction(kind Kind, dt reduce.DType, op reduce.Op, bytes int) (Algo, bool) {
	wide := g.wideFor(dt, op)
	return g.decide(shape{kind: kind, n: g.n, bytes: bytes, wide: wide}), wide
}

// decide is pick for the group's own calls, which do not overlap: a
// call of the same shape as the last (a training loop's) skips the table,
// whose rows are calls through function values, several times the cost
// of comparing the shape.
func (g *Group) decide(s shape) Algo {
	if g.last.valid && g.last.s == s {
		return g.last.a
	}
	a, row := g.pick(s)
	g.last.s, g.last.a, g.last.valid = s, a, true
	if g.logInfo {
		g.logChoice(s, a, row)
	}
	return a
}

// lastChoice is the shape of a group's last call and the algorithm
// decide chose for it.
type lastChoice struct {
	s     shape
	a     Algo
	valid bool
}

// Choice says which algorithm this group runs for a call of kind on
// bytes of dt under op (ignored by the collectives that reduce nothing),
// and why: the same decision, and the same words, as the call itself
// logs at info level. Every rank of a communicator decides alike, as
// the options come from the job's plan.
func (g *Group) Choice(kind Kind, bytes int, dt reduce.DType, op reduce.Op) (Algo, string) {
	s := shape{kind: kind, n: g.n, bytes: bytes}
	switch kind {
	case AllReduce, ReduceScatter, ReduceScatterV, Reduce:
		s.exact = exactFloat(dt, op)
		if kind != Reduce && !s.exact {
			s.wide = g.wideFor(dt, op)
		}
	}
	a, row := g.pick(s)
	return a, rules[row].why(g, s)
}

// logChoice logs the first call that each row of rules decided, with the
// row's reason (sizes vary per call).
//
//go:noinline
func (g *Group) logChoice(s shape, a Algo, row int) {
	key := decision{s.kind, a, row, s.mapped, s.read}
	g.logMu.Lock()
	first := !g.logged[key]
	g.logged[key] = true
	g.logMu.Unlock()
	if first {
		g.opts.Logger.Info("algorithm chosen", "collective", s.kind.String(), "algo", a.String(), "ranks", s.n, "why", rules[row].why(g, s))
	}
}

// decision is one (collective, algorithm, row of rules) choice, logged
// the first time, for buffers every rank maps and others apart: the
// reasons differ (notSingle).
type decision struct {
	kind   Kind
	algo   Algo
	row    int
	mapped bool
	read   bool
}
