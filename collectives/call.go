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
	spec
	seq uint64
}

// spec is what a collective says about its call; newCall numbers it.
//
// It is four fields, the kind, algorithm, type and op packed into one, and
// a header is two, because the compiler keeps a struct of at most four
// fields (and 32 bytes) in registers: from the collective that fills it in
// through newCall, and into the words the wire carries, rather than
// through memory, where copying what was just stored a byte at a time
// stalls on store forwarding.
type spec struct {
	what  uint32 // see tag
	root  uint32
	count uint64
	// extra tells apart calls whose other fields agree but whose
	// per-rank layout differs: a checksum of the counts of the v-variants.
	extra uint32
}

// tag packs what a header says about the call, a byte each. The op's
// byte also says whether 16-bit partial results travel as float32
// (wideBit; see wide.go): ranks that disagree on it must not exchange
// data.
func tag(k Kind, a Algo, dt reduce.DType, op reduce.Op) uint32 {
	o := uint32(op)
	if reduce.Wide(dt, op) && a != Local {
		o |= wideBit
	}
	return uint32(k) | uint32(a)<<8 | uint32(dt)<<16 | o<<24
}

func (h header) kind() Kind          { return Kind(h.what) }
func (h header) algo() Algo          { return Algo(h.what >> 8) }
func (h header) dtype() reduce.DType { return reduce.DType(h.what >> 16) }
func (h header) op() reduce.Op       { return reduce.Op(h.what>>24) &^ wideBit }
func (h header) wide() bool          { return h.what>>24&wideBit != 0 }

const (
	hdrLen   = 32
	hdrMagic = 0x4743 // "GC"
	hdrVer   = 1
	// combineMax is the largest payload sent in one message together with
	// the header over a bare transport (copied once into a small buffer);
	// larger payloads go as a header-only message followed by the data,
	// sent straight from the caller's buffer. Over a communicator's
	// Channel every segment shares its message with the header (send).
	combineMax = 16 << 10
)

// words is h as it travels, little-endian: magic, version, then kind,
// algorithm, type and op a byte each and a zero byte; seq; count; root
// and extra.
func (h header) words() (w0, w1, w2, w3 uint64) {
	return hdrMagic | hdrVer<<16 | uint64(h.what)<<24, h.seq, h.count, uint64(h.root) | uint64(h.extra)<<32
}

func (h header) put(b []byte) {
	w0, w1, w2, w3 := h.words()
	_ = b[hdrLen-1]
	binary.LittleEndian.PutUint64(b[0:], w0)
	binary.LittleEndian.PutUint64(b[8:], w1)
	binary.LittleEndian.PutUint64(b[16:], w2)
	binary.LittleEndian.PutUint64(b[24:], w3)
}

// sentBy reports whether b starts with h as it travels.
func (h header) sentBy(b []byte) bool {
	if len(b) < hdrLen {
		return false
	}
	w0, w1, w2, w3 := h.words()
	return binary.LittleEndian.Uint64(b[0:]) == w0 && binary.LittleEndian.Uint64(b[8:]) == w1 &&
		binary.LittleEndian.Uint64(b[16:]) == w2 && binary.LittleEndian.Uint64(b[24:]) == w3
}

func parseHeader(b []byte) (header, bool) {
	if len(b) < hdrLen || binary.LittleEndian.Uint16(b) != hdrMagic || b[2] != hdrVer {
		return header{}, false
	}
	return header{
		spec: spec{
			what:  binary.LittleEndian.Uint32(b[3:]),
			count: binary.LittleEndian.Uint64(b[16:]),
			root:  binary.LittleEndian.Uint32(b[24:]),
			extra: binary.LittleEndian.Uint32(b[28:]),
		},
		seq: binary.LittleEndian.Uint64(b[8:]),
	}, true
}

func (h header) String() string {
	if h.kind() == Barrier {
		return fmt.Sprintf("%v #%d (algo %v)", h.kind(), h.seq, h.algo())
	}
	s := fmt.Sprintf("%v #%d (algo %v, %d x %v", h.kind(), h.seq, h.algo(), h.count, h.dtype())
	switch h.kind() {
	case AllReduce, ReduceScatter, ReduceScatterV:
		s += fmt.Sprintf(", %v", h.op())
	case Broadcast, Reduce, Gather, Scatter:
		s += fmt.Sprintf(", root %d", h.root)
	}
	if h.kind() == Reduce {
		s += fmt.Sprintf(", %v", h.op())
	}
	if h.wide() {
		s += " in float32"
	}
	if h.extra != 0 && h.algo() == SingleCopy {
		s += fmt.Sprintf(", place %08x", h.extra) // where in the shared memory (comm.Alloc)
	} else if h.extra != 0 {
		s += fmt.Sprintf(", counts %08x", h.extra)
	}
	return s + ")"
}

// call is the state of one collective on one rank.
type call struct {
	g   *Group
	ctx context.Context
	t   transport.Transport
	// ch is t when t is a communicator's Channel (always, under comm):
	// called directly, not through the interface, and sent the header
	// apart from the payload, which the mux writes straight behind its
	// own, a small collective's messages take one copy and two dynamic
	// calls fewer.
	ch  *Channel
	hdr header
	// segMax is the largest payload of one message, leaving room for the
	// header, and a multiple of 64 so every element type divides it.
	segMax int
	// tally is Options.Traffic: nil, the usual case, counts nothing.
	tally *Traffic
}

func (g *Group) newCall(ctx context.Context, s spec) *call {
	g.seq++
	if g.opts.Round16 {
		s.what &^= wideBit << 24
	}
	// Calls on a group run one at a time, so one call value is reused
	// rather than allocated for every collective; NewGroup set the fields
	// that never change.
	g.cur.ctx, g.cur.hdr = ctx, header{s, g.seq}
	g.record(g.cur.hdr)
	return &g.cur
}

// headers splits what Recent returned into headers.
func headers(b []byte) []header {
	var hs []header
	for ; len(b) >= hdrLen; b = b[hdrLen:] {
		if h, ok := parseHeader(b[:hdrLen]); ok {
			hs = append(hs, h)
		}
	}
	return hs
}

// latest is the header of the highest call number in b, as Recent gives.
func latest(b []byte) (header, bool) {
	var best header
	found := false
	for _, h := range headers(b) {
		if !found || h.seq > best.seq {
			best, found = h, true
		}
	}
	return best, found
}

// Disagree compares the calls of this rank and of rank peer, as Recent
// gives them: if both hold a call of the same number with different
// arguments, it says how in an error that matches ErrMismatch; otherwise
// nil. Ranks stuck in a call that no message can show to be mismatched
// (a broadcast whose ranks disagree on the root all wait to receive, or
// the others finish and wait in the next call) find each other this way.
func Disagree(mine, theirs []byte, peer int) error {
	hs := headers(theirs)
	for _, a := range headers(mine) {
		for _, b := range hs {
			if a.seq == b.seq && a != b {
				return fmt.Errorf("this rank called %v, rank %d called %v: %w", a, peer, b, ErrMismatch)
			}
		}
	}
	return nil
}

// DescribeCall says what the latest call in b (as Recent gives) is, as
// errors name calls: "gather #3 (algo linear, 10 x int32, root 0)".
func DescribeCall(b []byte) string {
	h, ok := latest(b)
	if !ok {
		return "no call yet"
	}
	return h.String()
}

// CallNumber is the number of the latest call in b, as Recent gives
// (calls count from 1), or 0 if b holds none.
func CallNumber(b []byte) uint64 {
	h, _ := latest(b)
	return h.seq
}

// send sends data to peer, prefixed by the call header if this is the
// first message to that peer in this call.
func (c *call) send(peer int, data []byte) error {
	c.tally.sending(len(data))
	if c.g.sentSeq[peer] != c.hdr.seq {
		c.g.sentSeq[peer] = c.hdr.seq
		if c.ch != nil && len(data) <= c.segMax {
			// The mux writes the header behind its own and the payload
			// goes from data as it is, so no size is too large to
			// share a message: a header of its own would cost the
			// call a frame, a slot and, on TCP, a credit frame more.
			return c.wrap(c.ch.send(c.ctx, peer, 0, &c.hdr, data))
		}
		if len(data) <= combineMax {
			buf := c.g.small[:hdrLen+len(data)]
			c.hdr.put(buf)
			c.copy(buf[hdrLen:], data)
			return c.wrap(c.t.Send(c.ctx, peer, buf))
		}
		buf := c.g.small[:hdrLen]
		c.hdr.put(buf)
		if err := c.t.Send(c.ctx, peer, buf); err != nil {
			return c.wrap(err)
		}
	}
	return c.wrap(c.t.Send(c.ctx, peer, data))
}

// recv receives the next message of this call from peer, which must carry
// exactly want bytes of payload: msg.Data is the payload, without the
// call header. The caller releases msg once done with it. (The payload is
// not returned beside msg, so that the results fit in registers.)
func (c *call) recv(peer, want int) (msg transport.Message, err error) {
	if msg, err = c.next(peer); err != nil {
		return msg, c.wrap(err)
	}
	if c.g.gotSeq[peer] != c.hdr.seq {
		c.g.gotSeq[peer] = c.hdr.seq
		data := msg.Data
		if !c.hdr.sentBy(data) {
			err := c.mismatch(peer, data)
			c.release(msg)
			return msg, err
		}
		msg.Data = data[hdrLen:]
		if len(msg.Data) == 0 && want > 0 {
			c.release(msg)
			if msg, err = c.next(peer); err != nil {
				return msg, c.wrap(err)
			}
		}
	}
	if len(msg.Data) != want {
		c.release(msg)
		return msg, fmt.Errorf("%v: rank %d sent %d bytes where %d were expected: %w", c.hdr, peer, len(msg.Data), want, ErrMismatch)
	}
	return msg, nil
}

// next is the next message from peer on the transport.
func (c *call) next(peer int) (transport.Message, error) {
	if c.ch != nil {
		return c.ch.recv(c.ctx, peer, 0)
	}
	return c.t.Recv(c.ctx, peer)
}

// release hands a message of this call back to the transport.
func (c *call) release(msg transport.Message) {
	if c.ch != nil {
		c.ch.Release(msg)
		return
	}
	c.t.Release(msg)
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
