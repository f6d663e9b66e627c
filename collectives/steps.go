package collectives

import "github.com/gocoll/gocoll/internal/reduce"

func mod(a, n int) int { return ((a % n) + n) % n }

// chunk is the byte range of the i-th of n near-equal parts of count
// elements of size es; the first count%n parts have one element more.
func chunk(b []byte, count, n, i, es int) []byte {
	lo, hi := span(count, n, i)
	return b[lo*es : hi*es : hi*es]
}

// span is where chunk i lies, in elements.
func span(count, n, i int) (lo, hi int) {
	q, r := count/n, count%n
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// stream sends out to next and receives in from prev, segment by segment,
// handing each received segment to land (which reduces or copies it into
// place straight from the receive slot). Each rank sends segment k before
// waiting for segment k, so the ring never waits on itself, and the
// transport's slots keep the next segments flowing while this one lands.
func (c *call) stream(next, prev int, out, in []byte, land func(dst, src []byte)) error {
	ns, nr := c.segments(len(out)), c.segments(len(in))
	for k := 0; k < max(ns, nr); k++ {
		if k < ns {
			if err := c.send(next, c.seg(out, k)); err != nil {
				return err
			}
		}
		if k < nr {
			dst := c.seg(in, k)
			msg, err := c.recv(prev, len(dst))
			if err != nil {
				return err
			}
			land(dst, msg.Data)
			c.release(msg)
		}
	}
	return nil
}

// combine reduces a peer's data src into ours, dst, as lower-rank op
// higher-rank, so both sides of an exchange compute the same bits, NaN
// payloads included. It is called from closures written at each call
// site, which stay on the stack: a closure returned from a helper would
// be allocated on every collective.
func (c *call) combine(dt reduce.DType, op reduce.Op, peerLower bool, dst, src []byte) {
	if peerLower {
		c.reduce(dt, op, dst, src, dst)
	} else {
		c.reduce(dt, op, dst, dst, src)
	}
}

func (c *call) sendAll(peer int, b []byte) error {
	for k := 0; k < c.segments(len(b)); k++ {
		if err := c.send(peer, c.seg(b, k)); err != nil {
			return err
		}
	}
	return nil
}

func (c *call) recvAll(peer int, b []byte, land func(dst, src []byte)) error {
	for k := 0; k < c.segments(len(b)); k++ {
		dst := c.seg(b, k)
		msg, err := c.recv(peer, len(dst))
		if err != nil {
			return err
		}
		land(dst, msg.Data)
		c.release(msg)
	}
	return nil
}
