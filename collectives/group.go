package collectives

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// Kind names a collective.
type Kind uint8

// The collectives. Their values travel in the call header.
const (
	AllReduce     Kind = iota + 1 // reduce across ranks, result everywhere
	Broadcast                     // root's buffer to every rank
	Barrier                       // wait for every rank
	AllGather                     // concatenate every rank's block everywhere
	ReduceScatter                 // reduce, block q of the result to rank q
)

var kindNames = map[Kind]string{
	AllReduce: "allreduce", Broadcast: "broadcast", Barrier: "barrier",
	AllGather: "allgather", ReduceScatter: "reducescatter",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Algo names an algorithm.
type Algo uint8

// The algorithms (more in more.go). Their values travel in the call
// header.
const (
	// Auto: chosen by size and rank count (see choose).
	Auto Algo = iota
	// Local: a job of one rank; nothing crosses the wire.
	Local
	// Ring: bandwidth-optimal; every rank sends and receives 2(n-1)/n of the
	// buffer (allreduce) in n-1 or 2(n-1) pipelined steps.
	Ring
	// RecursiveDoubling: latency-optimal allreduce in log2(n) exchanges of
	// the whole buffer (plus one fold-in and one fold-out step when n is not
	// a power of two).
	RecursiveDoubling
	// Binomial: broadcast down a binomial tree, log2(n) rounds.
	Binomial
	// Chain: broadcast along a pipelined chain, root to root-1, bandwidth
	// of one link whatever n.
	Chain
	// Dissemination: barrier in ceil(log2(n)) rounds.
	Dissemination
	// Hier: allreduce by host (see Options.Hosts): reduce to a leader
	// inside each host, ring among the leaders, broadcast inside each host.
	Hier
)

var algoNames = map[Algo]string{
	Auto: "auto", Local: "local", Ring: "ring", RecursiveDoubling: "rd",
	Binomial: "binomial", Chain: "chain", Dissemination: "dissemination",
	Hier: "hier",
}

func (a Algo) String() string {
	if s, ok := algoNames[a]; ok {
		return s
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

// algos lists what each collective can run, default first.
var algos = map[Kind][]Algo{
	AllReduce:     {Ring, RecursiveDoubling, Rabenseifner, Tree, Hier},
	Broadcast:     {Chain, Binomial},
	Barrier:       {Dissemination},
	AllGather:     {Ring},
	ReduceScatter: {Ring},
}

// ErrBadAlgo reports an unknown or inapplicable algorithm name.
var ErrBadAlgo = errors.New("bad algorithm selection")

// ParseAlgos reads an override in GOCOLL_ALGO syntax: either one name that
// applies to every collective that has such an algorithm ("ring"), or a
// comma-separated list of collective=name pairs
// ("allreduce=rd,broadcast=chain"). The empty string means no override.
func ParseAlgos(s string) (map[Kind]Algo, error) {
	out := make(map[Kind]Algo)
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	byName := func(name string) (Algo, bool) {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "recursive-doubling" || name == "recursive_doubling" {
			name = "rd"
		}
		for a, n := range algoNames {
			if n == name && a != Local {
				return a, true
			}
		}
		return 0, false
	}
	if !strings.Contains(s, "=") {
		a, ok := byName(s)
		if !ok {
			return nil, fmt.Errorf("GOCOLL_ALGO=%q: unknown algorithm (known: %s): %w", s, knownAlgos(), ErrBadAlgo)
		}
		for k, list := range algos {
			for _, x := range list {
				if x == a || a == Auto {
					out[k] = a
				}
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("GOCOLL_ALGO=%q applies to no collective: %w", s, ErrBadAlgo)
		}
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		kname, aname, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("GOCOLL_ALGO: %q is not collective=algorithm: %w", part, ErrBadAlgo)
		}
		var kind Kind
		for k, n := range kindNames {
			if n == strings.ToLower(strings.TrimSpace(kname)) {
				kind = k
			}
		}
		if kind == 0 {
			return nil, fmt.Errorf("GOCOLL_ALGO: unknown collective %q: %w", kname, ErrBadAlgo)
		}
		a, ok := byName(aname)
		if !ok {
			return nil, fmt.Errorf("GOCOLL_ALGO: unknown algorithm %q for %v (known: %s): %w", aname, kind, knownAlgos(), ErrBadAlgo)
		}
		if a != Auto && !contains(algos[kind], a) {
			return nil, fmt.Errorf("GOCOLL_ALGO: %v has no %v algorithm (it has %v): %w", kind, a, algos[kind], ErrBadAlgo)
		}
		out[kind] = a
	}
	return out, nil
}

func knownAlgos() string {
	var names []string
	for a, n := range algoNames {
		if a != Local {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func contains(list []Algo, a Algo) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// Options configure a Group.
type Options struct {
	// Algos forces an algorithm per collective (see ParseAlgos).
	Algos map[Kind]Algo
	// SmallAllReduce is the largest allreduce, in bytes, that runs a
	// latency-bound algorithm (recursive doubling or tree) rather than a
	// bandwidth-bound one (ring or Rabenseifner); default 64 KiB. See
	// allReduceChoice for the rest of the table.
	SmallAllReduce int
	// SmallBroadcast is the largest broadcast that uses the binomial tree
	// rather than the chain (default 64 KiB).
	SmallBroadcast int
	// Hosts maps each rank to its host (any ids, equal for ranks that
	// share a host). With several hosts and several ranks on one of them,
	// allreduce runs Hier unless overridden. Nil means one host.
	Hosts []int
	// Logger receives the algorithm choices (info, once per choice) and
	// per-call detail (debug). Nil means silent.
	Logger *slog.Logger
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

	logMu  sync.Mutex
	logged map[decision]bool

	hier bool // Options.Hosts calls for the hierarchical allreduce
	n    int  // t.Size() and t.Rank(), asked once
	rank int
	// Read once at NewGroup, as every call needs them: a map lookup and
	// the logger's level cost a small allreduce more than its arithmetic.
	forced  [kindLimit]Algo // Options.Algos by kind
	logInfo bool            // Logger is on at info level
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
	g.cur = call{g: g, t: t, segMax: (t.MaxMessage() - hdrLen) &^ 63}
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

// choose picks the algorithm for a call and says why, once, at info level.
// It runs on every call, so the pick itself builds nothing: the reason is
// worked out only when it is logged.
func (g *Group) choose(kind Kind, bytes int) Algo {
	a := g.pick(kind, bytes)
	if g.logInfo {
		g.logChoice(kind, a, bytes)
	}
	return a
}

// pick is choose's decision: the forced algorithm if there is one, else
// the selection table of the collective (allReduceChoice for allreduce).
func (g *Group) pick(kind Kind, bytes int) Algo {
	n := g.n
	if n == 1 {
		return Local
	}
	if kind < kindLimit && g.forced[kind] != Auto {
		return g.forced[kind]
	}
	switch kind {
	case AllReduce:
		if g.hier {
			return Hier
		}
		return g.allReduceChoice(n, bytes)
	case Broadcast:
		if bytes <= g.opts.SmallBroadcast || n == 2 {
			return Binomial
		}
		return Chain
	}
	return algos[kind][0]
}

// logChoice logs the first call that made each (collective, algorithm)
// decision, with its reason (sizes vary per call).
//
//go:noinline
func (g *Group) logChoice(kind Kind, a Algo, bytes int) {
	key := decision{kind, a}
	g.logMu.Lock()
	first := !g.logged[key]
	g.logged[key] = true
	g.logMu.Unlock()
	if first {
		g.opts.Logger.Info("algorithm chosen", "collective", kind.String(), "algo", a.String(), "ranks", g.n, "why", g.why(kind, a, bytes))
	}
}

// why is the reason pick gave a for a call of kind on bytes.
func (g *Group) why(kind Kind, a Algo, bytes int) string {
	n := g.n
	switch {
	case n == 1:
		return "one rank"
	case kind < kindLimit && g.forced[kind] != Auto:
		return "GOCOLL_ALGO"
	}
	switch kind {
	case AllReduce:
		if g.hier {
			return hostsWhy(g.opts.Hosts, n)
		}
		return g.allReduceWhy(a, n, bytes)
	case Broadcast:
		if a == Binomial {
			return fmt.Sprintf("%d bytes, %d ranks: latency-bound", bytes, n)
		}
		return fmt.Sprintf("%d bytes > %d: bandwidth-bound", bytes, g.opts.SmallBroadcast)
	}
	return "only algorithm"
}

// decision is one (collective, algorithm) choice, logged the first time.
type decision struct {
	kind Kind
	algo Algo
}

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
