package collectives

import (
	"errors"
	"fmt"
	"sort"
	"strings"
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
	// Reduce combines every rank's buffer into the root's.
	Reduce
	// Gather concatenates every rank's buffer, in rank order, at the root.
	Gather
	// Scatter hands block q of the root's buffer to rank q.
	Scatter
	// AllGatherV is AllGather with a count per rank.
	AllGatherV
	// ReduceScatterV is ReduceScatter with a count per rank.
	ReduceScatterV
	// AllToAll sends block q of every rank's buffer to rank q.
	AllToAll
	// AllToAllV is AllToAll with a count per (sender, receiver) pair.
	AllToAllV
)

var kindNames = map[Kind]string{
	AllReduce: "allreduce", Broadcast: "broadcast", Barrier: "barrier",
	AllGather: "allgather", ReduceScatter: "reducescatter", Reduce: "reduce",
	Gather: "gather", Scatter: "scatter", AllGatherV: "allgatherv",
	ReduceScatterV: "reducescatterv", AllToAll: "alltoall", AllToAllV: "alltoallv",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Algo names an algorithm.
type Algo uint8

// The algorithms. Their values travel in the call header, so they never
// change: the first block counts from 0, the second from 32.
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

const (
	// Linear: the root talks to every other rank in turn (gather, scatter).
	Linear Algo = iota + 32
	// Pairwise: all-to-all in n-1 exchange steps, rank r sending to r+s
	// and receiving from r-s in step s. For a reduce-scatter (and the
	// reduce-scatter phase of an allreduce, whose allgather phase is the
	// ring's), every rank sends block q of its input straight to rank q,
	// which reduces the n inputs of its block in rank order (wide.go).
	Pairwise
	// Rabenseifner: allreduce as a recursive-halving reduce-scatter then a
	// recursive-doubling allgather: log2(n) steps like recursive doubling,
	// but each rank moves only 2(n-1)/n of the buffer like the ring.
	Rabenseifner
	// Tree: allreduce as a binomial-tree reduce to rank 0, then a
	// binomial-tree broadcast, both pipelined by segment.
	Tree
	// SingleCopy: allreduce of buffers every rank of one host maps
	// (comm.Alloc) or reads (comm.Register): each rank reduces its
	// block reading every peer's buffer, then copies the other blocks
	// from their owners (window.go). The table chooses it only for such
	// buffers (SingleCopyAllReduce, SingleCopyAllReduceRead), from
	// Options.SingleCopyMin bytes.
	SingleCopy
	// HierPipe: Hier cut into stages of Options.HierSegment bytes, a
	// leader's exchange of stage k with the other leaders overlapping its
	// host's reduce of stage k+1 and broadcast of stage k-1; the same
	// bits as Hier.
	HierPipe
)

var algoNames = map[Algo]string{
	Auto: "auto", Local: "local", Ring: "ring", RecursiveDoubling: "rd",
	Binomial: "binomial", Chain: "chain", Dissemination: "dissemination",
	Hier: "hier", Linear: "linear", Pairwise: "pairwise", Rabenseifner: "rabenseifner",
	Tree: "tree", SingleCopy: "singlecopy", HierPipe: "hierpipe",
}

func (a Algo) String() string {
	if s, ok := algoNames[a]; ok {
		return s
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

// algos lists what each collective can run, default first.
var algos = map[Kind][]Algo{
	AllReduce:      {Ring, RecursiveDoubling, Rabenseifner, Tree, Hier, HierPipe, Pairwise},
	Broadcast:      {Chain, Binomial},
	Barrier:        {Dissemination},
	AllGather:      {Ring},
	ReduceScatter:  {Ring, Pairwise},
	Reduce:         {Binomial},
	Gather:         {Linear},
	Scatter:        {Linear},
	AllGatherV:     {Ring},
	ReduceScatterV: {Ring, Pairwise},
	AllToAll:       {Pairwise},
	AllToAllV:      {Pairwise},
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
			if n == name && a != Local && a != SingleCopy {
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
		if a != Local && a != SingleCopy {
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
