package collectives

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

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
// into the 16-bit buffer with round(down, up).
func (c *call) hierUpDown(up, down []byte, count int, dt reduce.DType, op reduce.Op, round func(down, up []byte)) error {
	tp := newTopology(c.g.opts.Hosts, c.t.Rank(), c.t.Size())
	// The tree's shape follows the caller's size, which every rank knows
	// alike, not the width that travels.
	parent, children := c.localTree(tp, len(down))
	// Up the tree, segment by segment, so that a rank passes segment k on
	// while its children are still sending k+1.
	if err := c.reduceUp(up, dt, op, parent, children); err != nil {
		return err
	}
	if tp.lead >= 0 && len(tp.leaders) > 1 {
		if err := c.ringAllReduceAmong(up, count, dt, op, tp.leaders, tp.lead); err != nil {
			return err
		}
	}
	if round != nil && parent < 0 {
		round(down, up)
	}
	// Down the same tree.
	return c.spreadDown(down, parent, children)
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

// hierPipeAllReduce is hierAllReduce cut into stages (see stages), run
// so that a leader's exchange of stage k with the other leaders overlaps
// its host's reduce of stage k+1 and broadcast of stage k-1, each
// intra-host phase on a goroutine of its own. Every element is reduced
// in the same order as by hierAllReduce, so the two agree bit for bit.
func (c *call) hierPipeAllReduce(buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	return c.hierPipe(buf, buf, count, dt, op, nil)
}

// stages is how the pipelined hierarchical allreduce cuts count
// elements among nl leaders: stage k is elements [k*per, (k+1)*per) of
// every one of the nl chunks the leaders' ring splits the buffer into
// (the chunks of chunk), per being segment bytes over the nl chunks.
// It depends only on what every rank of the call knows alike (the
// count, the element size, the host map and the plan's segment).
type stages struct {
	count, nl, per, n int
}

func newStages(count, nl, es, segment int) stages {
	per := max(segment/(nl*es), 1)
	longest := (count + nl - 1) / nl
	return stages{count: count, nl: nl, per: per, n: max((longest+per-1)/per, 1)}
}

// part is stage k of chunk j of b, whose elements are es bytes.
func (st stages) part(b []byte, es, j, k int) []byte {
	ch := chunk(b, st.count, st.nl, j, es)
	lo := min(k*st.per*es, len(ch))
	hi := min(lo+st.per*es, len(ch))
	return ch[lo:hi:hi]
}

// hierPipe is hierUpDown, pipelined (see hierPipeAllReduce); its
// arguments are hierUpDown's, round called on each stage's parts.
func (c *call) hierPipe(up, down []byte, count int, dt reduce.DType, op reduce.Op, round func(down, up []byte)) error {
	tp := newTopology(c.g.opts.Hosts, c.t.Rank(), c.t.Size())
	parent, children := c.localTree(tp, len(down))
	esUp, esDown := dt.Size(), 1
	if count > 0 {
		esDown = len(down) / count
	}
	st := newStages(count, len(tp.leaders), esDown, c.g.opts.HierSegment)
	upStage := func(k int) error {
		for j := 0; j < st.nl; j++ {
			if err := c.reduceUp(st.part(up, esUp, j, k), dt, op, parent, children); err != nil {
				return err
			}
		}
		return nil
	}
	downStage := func(k int) error {
		for j := 0; j < st.nl; j++ {
			if err := c.spreadDown(st.part(down, esDown, j, k), parent, children); err != nil {
				return err
			}
		}
		return nil
	}
	if parent >= 0 || st.nl == 1 {
		// Not a leader of several: nothing of its own to overlap. It
		// sends every stage up, then takes every stage down, in the
		// order its leader takes them.
		for k := 0; k < st.n; k++ {
			if err := upStage(k); err != nil {
				return err
			}
		}
		if round != nil && parent < 0 {
			round(down, up)
		}
		for k := 0; k < st.n; k++ {
			if err := downStage(k); err != nil {
				return err
			}
		}
		return nil
	}
	return c.leaderPipe(st, tp, up, down, esUp, esDown, dt, op, round, upStage, downStage)
}

// leaderPipe is hierPipe on a leader of several: four goroutines, one
// for each of the host's reduce (upStage), the sends to the next leader,
// the receives from the previous one, and the host's broadcast
// (downStage), each taking the stages in order. Stage k's ring starts
// once the host has reduced it; it goes down once its last ring step
// has landed and its last message left. The ring among the leaders is
// ringAllReduceAmong's, step for step, on stage k's parts (stage k of
// chunk j standing for chunk j), so every element is reduced in the
// same order; but its sender and receiver are apart, so that a message
// waits only for the one it depends on (the same segment of the step
// before, landed), never for the whole step before: the link to the
// next leader is not left idle while a step's last message crosses, and
// the first step of stage k+1 leaves while stage k's last is arriving.
//
// The goroutines talk to different peers, but for the two that send to
// and receive from the same one (the transport allows that). The first
// message to the next leader, which carries the call's header through
// the group's scratch (send), leaves before anything goes down (the
// broadcast of a stage waits for its last message to have left). The
// first goroutine to fail cancels the others, and its error is the
// call's.
func (c *call) leaderPipe(st stages, tp topology, up, down []byte, esUp, esDown int,
	dt reduce.DType, op reduce.Op, round func(down, up []byte), upStage, downStage func(k int) error) error {
	nl, i := st.nl, tp.lead
	part := func(k, j int) []byte { return st.part(up, esUp, j, k) }
	next, prev := tp.leaders[mod(i+1, nl)], tp.leaders[mod(i-1, nl)]
	steps := 2 * (nl - 1)
	// Step t of a stage sends block out(t) and receives block in(t), as
	// ringAllReduceAmong's: the reduce-scatter's steps, then the
	// allgather's. in(t) is out(t+1).
	out := func(t int) int {
		if t < nl-1 {
			return mod(i-t-1, nl)
		}
		return mod(i-(t-nl+1), nl)
	}
	in := func(t int) int { return out(t + 1) }
	// landed counts the segments received so far, in the order they
	// come; base[k*steps+t] is the count before stage k's step t.
	base := make([]int64, st.n*steps+1)
	for k := 0; k < st.n; k++ {
		for t := 0; t < steps; t++ {
			x := k*steps + t
			base[x+1] = base[x] + int64(c.segments(len(part(k, in(t)))))
		}
	}
	var landed atomic.Int64
	moved := make(chan struct{}, 1)

	parent := c.ctx
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	c.ctx = ctx
	defer func() { c.ctx = parent }()
	var (
		once sync.Once
		fail error
		wg   sync.WaitGroup
	)
	report := func(err error) {
		once.Do(func() { fail = err; cancel() })
	}
	// wait takes a stage from ch, false if the call ends first.
	wait := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			// The call's context ended, or another goroutine failed
			// and said so first.
			report(c.wrap(ctx.Err()))
			return false
		}
	}
	// Stage k is reduced in the host (to the sender, and to the
	// receiver, which reduces into it), sent, and landed.
	toSend, toRecv := make(chan struct{}, st.n), make(chan struct{}, st.n)
	sent, landedAll := make(chan struct{}, st.n), make(chan struct{}, st.n)
	phase := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				report(err)
			}
		}()
	}
	phase(func() error {
		for k := 0; k < st.n; k++ {
			if err := upStage(k); err != nil {
				return err
			}
			toSend <- struct{}{}
			toRecv <- struct{}{}
		}
		return nil
	})
	phase(func() error { // to the next leader
		for k := 0; k < st.n; k++ {
			if !wait(toSend) {
				return nil
			}
			for t := 0; t < steps; t++ {
				b := part(k, out(t))
				for m := 0; m < c.segments(len(b)); m++ {
					// Segment m of this step's block is segment m of the
					// block the step before received.
					for t > 0 && landed.Load() <= base[k*steps+t-1]+int64(m) {
						if !wait(moved) {
							return nil
						}
					}
					if err := c.send(next, c.seg(b, m)); err != nil {
						return err
					}
				}
			}
			sent <- struct{}{}
		}
		return nil
	})
	phase(func() error { // from the previous leader
		for k := 0; k < st.n; k++ {
			if !wait(toRecv) {
				return nil
			}
			for t := 0; t < steps; t++ {
				b := part(k, in(t))
				for m := 0; m < c.segments(len(b)); m++ {
					dst := c.seg(b, m)
					msg, err := c.recv(prev, len(dst))
					if err != nil {
						return err
					}
					if t < nl-1 {
						c.reduce(dt, op, dst, dst, msg.Data)
					} else {
						c.copy(dst, msg.Data)
					}
					c.release(msg)
					landed.Add(1)
					select {
					case moved <- struct{}{}:
					default:
					}
				}
			}
			landedAll <- struct{}{}
		}
		return nil
	})
	phase(func() error {
		for k := 0; k < st.n; k++ {
			// Rounding scales the float32 parts in place (Avg): not
			// before the last of them has left.
			if !wait(landedAll) || !wait(sent) {
				return nil
			}
			if round != nil {
				for j := 0; j < nl; j++ {
					round(st.part(down, esDown, j, k), part(k, j))
				}
			}
			if err := downStage(k); err != nil {
				return err
			}
		}
		return nil
	})
	wg.Wait()
	return fail
}

// hostsWhy explains an automatic choice of the hierarchical allreduce.
func hostsWhy(hosts []int, n int) string {
	nh, widest, _ := hierarchical(hosts, n)
	return fmt.Sprintf("ranks on %d hosts, up to %d per host: reduce within hosts, ring among %d leaders, broadcast within hosts", nh, widest, nh)
}

// hostsPipeWhy explains an automatic choice of the pipelined
// hierarchical allreduce.
func hostsPipeWhy(hosts []int, n, bytes, segment int) string {
	nh, widest, _ := hierarchical(hosts, n)
	return fmt.Sprintf("ranks on %d hosts, up to %d per host, %d bytes >= 2 stages of %d: the ring among %d leaders on stage k overlaps the reduce within hosts of stage k+1 and the broadcast of stage k-1",
		nh, widest, bytes, segment, nh)
}
