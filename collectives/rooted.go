package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Broadcast copies root's buf into every other rank's buf.
func (g *Group) Broadcast(ctx context.Context, buf []byte, dt reduce.DType, root int) error {
	n := g.t.Size()
	if root < 0 || root >= n {
		return fmt.Errorf("broadcast: root %d out of range [0, %d)", root, n)
	}
	count, err := checkLen("broadcast", buf, dt)
	if err != nil {
		return err
	}
	algo := g.choose(Broadcast, len(buf))
	c := g.newCall(ctx, spec{what: tag(Broadcast, algo, dt, 0), count: uint64(count), root: uint32(root)})
	vr := mod(g.t.Rank()-root, n)
	real := func(v int) int { return mod(v+root, n) }
	parent := -1
	var children []int
	switch algo {
	case Local:
		return nil
	case Binomial:
		// The parent of vr clears its lowest set bit; its children add the
		// powers of two below that bit, farthest first.
		low := n
		if vr != 0 {
			low = vr & -vr
			parent = real(vr - low)
		}
		for m := 1; m < low && vr+m < n; m <<= 1 {
			children = append([]int{real(vr + m)}, children...)
		}
	case Chain:
		if vr > 0 {
			parent = real(vr - 1)
		}
		if vr < n-1 {
			children = []int{real(vr + 1)}
		}
	default:
		return fmt.Errorf("broadcast: algorithm %v: %w", algo, ErrBadAlgo)
	}
	// Segment by segment: receive from the parent, pass on to the children,
	// so a long chain is a pipeline rather than n full copies in a row.
	for k := 0; k < c.segments(len(buf)); k++ {
		seg := c.seg(buf, k)
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

// spreadDown receives each segment from the parent and passes it on to
// the children.
func (c *call) spreadDown(buf []byte, parent int, children []int) error {
	for k := 0; k < c.segments(len(buf)); k++ {
		seg := c.seg(buf, k)
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

// tree is this rank's place in the binomial tree rooted at root: its
// parent (-1 at the root) and its children, nearest first. Reduce
// gathers up it and Broadcast spreads down it.
func (g *Group) tree(root int) (parent int, children []int) {
	n := g.t.Size()
	vr := mod(g.t.Rank()-root, n)
	real := func(v int) int { return mod(v+root, n) }
	parent = -1
	low := n
	if vr != 0 {
		low = vr & -vr
		parent = real(vr - low)
	}
	for m := 1; m < low && vr+m < n; m <<= 1 {
		children = append(children, real(vr+m))
	}
	return parent, children
}

// Reduce combines send element-wise across ranks with op into recv on the
// root. recv is only written on the root, where it must be as long as
// send (it may be send itself); elsewhere it is ignored.
func (g *Group) Reduce(ctx context.Context, send, recv []byte, dt reduce.DType, op reduce.Op, root int) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	if err := g.checkRoot("reduce", root); err != nil {
		return err
	}
	count, err := checkLen("reduce", send, dt)
	if err != nil {
		return err
	}
	atRoot := g.t.Rank() == root
	if atRoot && len(recv) != len(send) {
		return invalid("reduce: receive buffer of %d bytes at the root, want %d like send", len(recv), len(send))
	}
	if op == reduce.ExactSum {
		if exactFloat(dt, op) {
			return g.exactReduce(ctx, send, recv, count, dt, root) // exact.go
		}
		op = exactOp(op)
	}
	algo := g.choose(Reduce, len(send))
	c := g.newCall(ctx, spec{what: tag(Reduce, algo, dt, op), count: uint64(count), root: uint32(root)})
	parent, children := g.tree(root)
	if algo != Local && g.wideFor(dt, op) {
		return c.reduceWide(send, recv, dt, op, parent, children)
	}
	acc := send
	switch {
	case atRoot:
		c.copy(recv, send)
		acc = recv
	case len(children) > 0:
		// An inner node must not write into send: it sums into scratch.
		acc = append([]byte(nil), send...)
	}
	if algo != Local {
		if err := c.reduceUp(acc, dt, op, parent, children); err != nil {
			return err
		}
		if err := c.receipts(parent, children); err != nil {
			return err
		}
	}
	if atRoot && op == reduce.Avg {
		reduce.Scale(dt, recv, g.t.Size())
	}
	return nil
}

// reduceWide is Reduce's tree with float32 partial results (wide.go):
// every rank sums into a float32 copy of send, and the root rounds the
// result, once, into recv.
func (c *call) reduceWide(send, recv []byte, dt reduce.DType, op reduce.Op, parent int, children []int) error {
	w, handle := getScratch(2 * len(send))
	defer putScratch(handle)
	reduce.Widen(dt, w, send)
	if err := c.reduceUp(w, reduce.Float32, op, parent, children); err != nil {
		return err
	}
	if err := c.receipts(parent, children); err != nil {
		return err
	}
	if parent < 0 {
		finishWide(dt, op, recv, w, c.t.Size())
	}
	return nil
}

// reduceUp folds the children's partial results into acc and passes acc
// to the parent, segment by segment, so that a deep tree is a pipeline.
// Each message is released before anything is sent, so a rank never holds
// a slot while it waits for a credit.
func (c *call) reduceUp(acc []byte, dt reduce.DType, op reduce.Op, parent int, children []int) error {
	for k := 0; k < c.segments(len(acc)); k++ {
		seg := c.seg(acc, k)
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
	return nil
}

// Gather concatenates every rank's send, in rank order, into recv on the
// root, where len(recv) must be Size()*len(send); elsewhere recv is
// ignored.
func (g *Group) Gather(ctx context.Context, send, recv []byte, dt reduce.DType, root int) error {
	if err := g.checkRoot("gather", root); err != nil {
		return err
	}
	count, err := checkLen("gather", send, dt)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if g.t.Rank() == root && len(recv) != n*len(send) {
		return invalid("gather: receive buffer of %d bytes at the root, want %d ranks x %d bytes = %d", len(recv), n, len(send), n*len(send))
	}
	algo := g.choose(Gather, len(send)*n)
	c := g.newCall(ctx, spec{what: tag(Gather, algo, dt, 0), count: uint64(count), root: uint32(root)})
	if g.t.Rank() != root {
		if err := c.sendAll(root, send); err != nil {
			return err
		}
		return c.receipts(root, nil)
	}
	c.copy(recv[root*len(send):], send)
	var others []int
	for q := 0; q < n; q++ {
		if q == root {
			continue
		}
		others = append(others, q)
		block := recv[q*len(send) : (q+1)*len(send)]
		if err := c.recvAll(q, block, func(dst, src []byte) { c.copy(dst, src) }); err != nil {
			return err
		}
	}
	return c.receipts(-1, others)
}

// receipts ends a collective whose data only flows toward the root
// (reduce, gather): it tells each child that its part arrived, then waits
// for the parent (-1: none) to say the same. Without it a rank that
// disagreed with the others on the root would send its part to a rank
// that never reads it, and every rank could return as if all were well;
// with it the sender waits, and the watchdog finds the disagreement (see
// Disagree). The receipt is the call header alone, so each end also
// checks the other's view of the call. Children are told first: they
// need not wait for the root.
func (c *call) receipts(parent int, children []int) error {
	for _, ch := range children {
		if err := c.send(ch, nil); err != nil {
			return err
		}
	}
	if parent < 0 {
		return nil
	}
	msg, err := c.recv(parent, 0)
	if err != nil {
		return err
	}
	c.release(msg)
	return nil
}

// Scatter hands block q of the root's send (Size() blocks of len(recv)
// bytes) to rank q's recv; send is ignored except on the root.
func (g *Group) Scatter(ctx context.Context, send, recv []byte, dt reduce.DType, root int) error {
	if err := g.checkRoot("scatter", root); err != nil {
		return err
	}
	count, err := checkLen("scatter", recv, dt)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if g.t.Rank() == root && len(send) != n*len(recv) {
		return invalid("scatter: send buffer of %d bytes at the root, want %d ranks x %d bytes = %d", len(send), n, len(recv), n*len(recv))
	}
	algo := g.choose(Scatter, len(recv)*n)
	c := g.newCall(ctx, spec{what: tag(Scatter, algo, dt, 0), count: uint64(count), root: uint32(root)})
	if g.t.Rank() != root {
		return c.recvAll(root, recv, func(dst, src []byte) { c.copy(dst, src) })
	}
	for q := 0; q < n; q++ {
		if q == root {
			continue
		}
		if err := c.sendAll(q, send[q*len(recv):(q+1)*len(recv)]); err != nil {
			return err
		}
	}
	c.copy(recv, send[root*len(recv):(root+1)*len(recv)])
	return nil
}
