package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// ErrMismatch reports that ranks called different collectives, or the same
// one with different arguments: what this rank called and what the peer
// called are both in the message.
var ErrMismatch = errors.New("collective mismatch between ranks")

// header describes one collective call. It travels once per (call, peer):
// prepended to the first message a rank sends to each peer in the call, so
// it costs a few bytes per collective, never per chunk. The receiver
// compares it with its own view of the call before touching any data.
type header struct {
	kind  Kind
	algo  Algo
	dtype reduce.DType
	op    reduce.Op
	seq   uint64
	count uint64
	root  uint32
	// extra tells apart calls whose other fields agree but whose
	// per-rank layout differs: a checksum of the counts of the v-variants.
	extra uint32
}

const (
	hdrLen   = 32
	hdrMagic = 0x4743 // "GC"
	hdrVer   = 1
	// combineMax is the largest payload sent in one message together with
	// the header (copied once into a small buffer); larger payloads go as a
	// header-only message followed by the data, sent straight from the
	// caller's buffer.
	combineMax = 16 << 10
)

func (h *header) put(b []byte) {
	binary.LittleEndian.PutUint16(b[0:], hdrMagic)
	b[2] = hdrVer
	b[3] = byte(h.kind)
	b[4] = byte(h.algo)
	b[5] = byte(h.dtype)
	b[6] = byte(h.op)
	b[7] = 0
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.count)
	binary.LittleEndian.PutUint32(b[24:], h.root)
	binary.LittleEndian.PutUint32(b[28:], h.extra)
}

func parseHeader(b []byte) (header, bool) {
	if len(b) < hdrLen || binary.LittleEndian.Uint16(b) != hdrMagic || b[2] != hdrVer {
		return header{}, false
	}
	return header{
		kind:  Kind(b[3]),
		algo:  Algo(b[4]),
		dtype: reduce.DType(b[5]),
		op:    reduce.Op(b[6]),
		seq:   binary.LittleEndian.Uint64(b[8:]),
		count: binary.LittleEndian.Uint64(b[16:]),
		root:  binary.LittleEndian.Uint32(b[24:]),
		extra: binary.LittleEndian.Uint32(b[28:]),
	}, true
}

func (h header) String() string {
	s := fmt.Sprintf("%v #%d (algo %v, %d x %v", h.kind, h.seq, h.algo, h.count, h.dtype)
	switch h.kind {
	case AllReduce, ReduceScatter, ReduceScatterV:
		s += fmt.Sprintf(", %v", h.op)
	case Broadcast, Reduce, Gather, Scatter:
		s += fmt.Sprintf(", root %d", h.root)
	}
	if h.kind == Reduce {
		s += fmt.Sprintf(", %v", h.op)
	}
	if h.extra != 0 {
		s += fmt.Sprintf(", counts %08x", h.extra)
	}
	return s + ")"
}

// call is the state of one collective on one rank.
type call struct {
	g   *Group
	ctx context.Context
	t   transport.Transport
	hdr header
	// wire is hdr as it travels, encoded once per call: the sends copy
	// it and the receives compare the peer's bytes with it, decoding
	// them only to say what differs.
	wire [hdrLen]byte
	// segMax is the largest payload of one message, leaving room for the
	// header, and a multiple of 64 so every element type divides it.
	segMax int
}

func (g *Group) newCall(ctx context.Context, h header) *call {
	g.seq++
	h.seq = g.seq
	// Calls on a group run one at a time, so one call value is reused
	// rather than allocated for every collective; NewGroup set the fields
	// that never change.
	g.cur.ctx, g.cur.hdr = ctx, h
	h.put(g.cur.wire[:])
	return &g.cur
}

// send sends data to peer, prefixed by the call header if this is the
// first message to that peer in this call.
func (c *call) send(peer int, data []byte) error {
	if c.g.sentSeq[peer] != c.hdr.seq {
		c.g.sentSeq[peer] = c.hdr.seq
		if len(data) <= combineMax {
			buf := c.g.small[:hdrLen+len(data)]
			copy(buf, c.wire[:])
			copy(buf[hdrLen:], data)
			return c.wrap(c.t.Send(c.ctx, peer, buf))
		}
		buf := c.g.small[:hdrLen]
		copy(buf, c.wire[:])
		if err := c.t.Send(c.ctx, peer, buf); err != nil {
			return c.wrap(err)
		}
	}
	return c.wrap(c.t.Send(c.ctx, peer, data))
}

// recv receives the next message of this call from peer, which must carry
// exactly want bytes of payload: msg.Data is the payload, without the
// call header. The caller releases msg once done with it. (The payload is
// not returned beside msg: the extra slice made the results spill from
// registers to memory, a measurable share of a small collective.)
func (c *call) recv(peer, want int) (msg transport.Message, err error) {
	msg, err = c.t.Recv(c.ctx, peer)
	if err != nil {
		return msg, c.wrap(err)
	}
	if c.g.gotSeq[peer] != c.hdr.seq {
		c.g.gotSeq[peer] = c.hdr.seq
		data := msg.Data
		if len(data) < hdrLen || [hdrLen]byte(data) != c.wire {
			err := c.mismatch(peer, data)
			c.t.Release(msg)
			return msg, err
		}
		msg.Data = data[hdrLen:]
		if len(msg.Data) == 0 && want > 0 {
			c.t.Release(msg)
			if msg, err = c.t.Recv(c.ctx, peer); err != nil {
				return msg, c.wrap(err)
			}
		}
	}
	if len(msg.Data) != want {
		c.t.Release(msg)
		return msg, fmt.Errorf("%v: rank %d sent %d bytes where %d were expected: %w", c.hdr, peer, len(msg.Data), want, ErrMismatch)
	}
	return msg, nil
}

// mismatch says how the header peer sent, at the start of data, differs
// from this call's.
func (c *call) mismatch(peer int, data []byte) error {
	theirs, ok := parseHeader(data)
	if !ok {
		return fmt.Errorf("%v: rank %d sent %d bytes that are not the start of a collective (it is in another call, or a different one): %w",
			c.hdr, peer, len(data), ErrMismatch)
	}
	return fmt.Errorf("this rank called %v, rank %d called %v: %w", c.hdr, peer, theirs, ErrMismatch)
}

// wrap names the call in a transport error.
func (c *call) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%v: %w", c.hdr, err)
}

// segments is the number of messages a chunk of n bytes travels in. An
// empty chunk still travels as one empty message, so that both ends always
// agree on the message count and the header always gets through.
func (c *call) segments(n int) int {
	if n <= c.segMax {
		// Most calls: no division, which costs a small message more
		// than its arithmetic.
		return 1
	}
	return (n + c.segMax - 1) / c.segMax
}

// seg is the k-th segment of chunk b.
func (c *call) seg(b []byte, k int) []byte {
	lo := min(k*c.segMax, len(b))
	hi := min(lo+c.segMax, len(b))
	return b[lo:hi]
}
