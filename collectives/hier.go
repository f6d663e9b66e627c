package collectives

import (
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// topology is what the hierarchical algorithms need of the rank->host map:
// the ranks on this rank's host, and one leader (the lowest rank) per host.
type topology struct {
	local   []int // ranks on this host, ascending; local[0] is the leader
	me      int   // this rank's index in local
	leaders []int // every host's leader, ascending
	lead    int   // this rank's index in leaders, or -1
}

func newTopology(hosts []int, rank, n int) topology {
	var tp topology
	if len(hosts) != n {
		hosts = make([]int, n) // no map: one host
	}
	seen := make(map[int]bool)
	tp.lead = -1
	for r := 0; r < n; r++ {
		if hosts[r] == hosts[rank] {
			if r == rank {
				tp.me = len(tp.local)
			}
			tp.local = append(tp.local, r)
		}
		if !seen[hosts[r]] {
			seen[hosts[r]] = true
			if r == rank {
				tp.lead = len(tp.leaders)
			}
			tp.leaders = append(tp.leaders, r)
		}
	}
	return tp
}

// hierarchical says whether the map has several hosts and at least one of
// them holds several ranks: only then does splitting the work by host pay.
func hierarchical(hosts []int, n int) (nhosts, widest int, ok bool) {
	if len(hosts) != n {
		return 1, n, false
	}
	count := make(map[int]int)
	for _, h := range hosts {
		count[h]++
		widest = max(widest, count[h])
	}
	return len(count), widest, len(count) > 1 && widest > 1
}

// hierAllReduce reduces inside each host to its leader, allreduces among
// the leaders with the ring, and broadcasts inside each host: the data
// crosses between hosts once per host rather than once per rank, and the
// intra-host steps run over the fast local transport. Every rank ends with
// the leaders' bytes, so all ranks agree exactly.
func (c *call) hierAllReduce(buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	return c.hierUpDown(buf, buf, count, dt, op, nil)
}

// hierUpDown is hierAllReduce: up reduces (with dt and op) up the host's
// tree and among the leaders, down carries the result down the tree. Both
// are buf, but for a wide reduction (wide.go), which reduces a float32
// copy, and where each leader, before sending anything down, rounds it
// into the 16-bit buffer with round.
func (c *call) hierUpDown(up, down []byte, count int, dt reduce.DType, op reduce.Op, round func()) error {
	tp := newTopology(c.g.opts.Hosts, c.t.Rank(), c.t.Size())
	// The tree's shape follows the caller's size, which every rank knows
	// alike, not the width that travels.
	parent, children := c.localTree(tp, len(down))
	// Up the tree, segment by segment, so that a rank passes segment k on
	// while its children are still sending k+1.
	for k := 0; k < c.segments(len(up)); k++ {
		seg := c.seg(up, k)
		for _, ch := range children {
			msg, err := c.recv(ch, len(seg))
			if err != nil {
				return err
			}
			c.reduce(dt, op, seg, seg, msg.Data)
			c.release(msg)
		}
		if parent >= 0 {
			if err := c.send(parent, seg); err != nil {
				return err
			}
		}
	}
	if tp.lead >= 0 && len(tp.leaders) > 1 {
		if err := c.ringAllReduceAmong(up, count, dt, op, tp.leaders, tp.lead); err != nil {
			return err
		}
	}
	if round != nil && parent < 0 {
		round()
	}
	// Down the same tree.
	for k := 0; k < c.segments(len(down)); k++ {
		seg := c.seg(down, k)
		if parent >= 0 {
			msg, err := c.recv(parent, len(seg))
			if err != nil {
				return err
			}
			c.copy(seg, msg.Data)
			c.release(msg)
		}
		for _, ch := range children {
			if err := c.send(ch, seg); err != nil {
				return err
			}
		}
	}
	return nil
}

// localTree is this rank's place in the tree over its host's ranks, rooted
// at the leader: a binomial tree (log depth) for latency-bound sizes, a
// chain (every link busy once the pipeline fills) for large ones.
func (c *call) localTree(tp topology, bytes int) (parent int, children []int) {
	v, n := tp.me, len(tp.local)
	parent = -1
	if bytes > c.g.opts.SmallAllReduce {
		if v > 0 {
			parent = tp.local[v-1]
		}
		if v < n-1 {
			children = []int{tp.local[v+1]}
		}
		return parent, children
	}
	low := n
	if v != 0 {
		low = v & -v
		parent = tp.local[v-low]
	}
	for m := 1; m < low && v+m < n; m <<= 1 {
		children = append(children, tp.local[v+m])
	}
	return parent, children
}

// ringAllReduceAmong is ringAllReduce over a subset of the ranks: ranks[i]
// is this rank. Avg is left unscaled (the caller scales once at the end).
func (c *call) ringAllReduceAmong(buf []byte, count int, dt reduce.DType, op reduce.Op, ranks []int, i int) error {
	n, es := len(ranks), dt.Size()
	next, prev := ranks[mod(i+1, n)], ranks[mod(i-1, n)]
	for s := 0; s < n-1; s++ {
		out := chunk(buf, count, n, mod(i-s-1, n), es)
		in := chunk(buf, count, n, mod(i-s-2, n), es)
		if err := c.stream(next, prev, out, in, func(dst, src []byte) { c.reduce(dt, op, dst, dst, src) }); err != nil {
			return err
		}
	}
	for s := 0; s < n-1; s++ {
		out := chunk(buf, count, n, mod(i-s, n), es)
		in := chunk(buf, count, n, mod(i-s-1, n), es)
		if err := c.stream(next, prev, out, in, func(dst, src []byte) { c.copy(dst, src) }); err != nil {
			return err
		}
	}
	return nil
}

// hostsWhy explains an automatic choice of the hierarchical allreduce.
func hostsWhy(hosts []int, n int) string {
	nh, widest, _ := hierarchical(hosts, n)
	return fmt.Sprintf("ranks on %d hosts, up to %d per host: reduce within hosts, ring among %d leaders, broadcast within hosts", nh, widest, nh)
}
