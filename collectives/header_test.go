package collectives

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// TestHeaderWire: a header survives the trip through its wire form, every
// field lands in the bytes the format gives it, and a header that differs
// in any field is told apart.
func TestHeaderWire(t *testing.T) {
	h := header{spec{what: tag(ReduceScatterV, Ring, reduce.BFloat16, reduce.Max), root: 0x01020304, count: 0x1122334455667788, extra: 0xa1b2c3d4}, 0x99aabbccddeeff00}
	b := make([]byte, hdrLen+3)
	h.put(b)
	want := []byte{
		0x43, 0x47, hdrVer, byte(ReduceScatterV), byte(Ring), byte(reduce.BFloat16), byte(reduce.Max), 0,
		0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0x04, 0x03, 0x02, 0x01, 0xd4, 0xc3, 0xb2, 0xa1,
	}
	if string(b[:hdrLen]) != string(want) {
		t.Fatalf("wire form\n got % x\nwant % x", b[:hdrLen], want)
	}
	got, ok := parseHeader(b)
	if !ok || got != h {
		t.Fatalf("parsed %+v (ok %v), want %+v", got, ok, h)
	}
	if h.kind() != ReduceScatterV || h.algo() != Ring || h.dtype() != reduce.BFloat16 || h.op() != reduce.Max {
		t.Fatalf("fields %v %v %v %v", h.kind(), h.algo(), h.dtype(), h.op())
	}
	if !h.sentBy(b) {
		t.Fatal("sentBy refuses the header's own bytes")
	}
	for i := 0; i < hdrLen; i++ {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if h.sentBy(c) {
			t.Errorf("sentBy accepts the header with byte %d changed", i)
		}
	}
	if h.sentBy(b[:hdrLen-1]) {
		t.Error("sentBy accepts a short message")
	}
	if _, ok := parseHeader(b[:hdrLen-1]); ok {
		t.Error("parseHeader accepts a short message")
	}
}

// TestHeaderWide: a 16-bit Sum, Avg or Prod says in its header that its
// partial results travel as float32, so that it never matches a call
// that reduces in 16 bits (or a build that did); the op still reads back
// as itself, and the call's name says it.
func TestHeaderWide(t *testing.T) {
	for _, tc := range []struct {
		k    Kind
		a    Algo
		dt   reduce.DType
		op   reduce.Op
		wide bool
	}{
		{AllReduce, Ring, reduce.BFloat16, reduce.Sum, true},
		{AllReduce, RecursiveDoubling, reduce.Float16, reduce.Avg, true},
		{Reduce, Binomial, reduce.Float16, reduce.Prod, true},
		{ReduceScatterV, Ring, reduce.BFloat16, reduce.Avg, true},
		{AllReduce, Local, reduce.BFloat16, reduce.Sum, false}, // nothing travels
		{AllReduce, Ring, reduce.BFloat16, reduce.Min, false},
		{AllReduce, Ring, reduce.Float32, reduce.Sum, false},
		{Broadcast, Chain, reduce.Float16, 0, false},
	} {
		h := header{spec{what: tag(tc.k, tc.a, tc.dt, tc.op), count: 10}, 3}
		if h.wide() != tc.wide || h.op() != tc.op || h.kind() != tc.k || h.algo() != tc.a || h.dtype() != tc.dt {
			t.Errorf("tag(%v, %v, %v, %v): wide %v op %v kind %v algo %v dtype %v", tc.k, tc.a, tc.dt, tc.op, h.wide(), h.op(), h.kind(), h.algo(), h.dtype())
		}
		b := make([]byte, hdrLen)
		h.put(b)
		if got, ok := parseHeader(b); !ok || got != h || got.wide() != tc.wide {
			t.Errorf("%v: parsed %+v (ok %v)", h, got, ok)
		}
		narrow := h
		narrow.what &^= wideBit << 24
		if tc.wide && narrow.sentBy(b) {
			t.Errorf("%v: a 16-bit call's header matches the wide one", h)
		}
		if s := h.String(); strings.HasSuffix(s, " in float32)") != tc.wide {
			t.Errorf("%v: name does not say whether partials are float32", s)
		}
	}
}

// TestHeaderSharesMessage: over a communicator's channel a call's header
// travels in the message of its first segment at every size, not only
// up to combineMax, so a two-rank allreduce by recursive doubling is one
// message each way (over a bare transport, whose payloads the group would
// first have to copy behind the header, only up to combineMax, which the
// mirror, holding one message, shows). Either way the sum is right.
func TestHeaderSharesMessage(t *testing.T) {
	const slot = 512<<10 + MuxHeader
	for _, tc := range []struct {
		bytes    int
		channel  bool
		messages int
	}{
		{64, true, 1},
		{combineMax, true, 1},
		{combineMax + 64, true, 1},
		{32 << 10, true, 1},
		{64 << 10, true, 1},
		{64, false, 1},
		{combineMax, false, 1},
	} {
		m := &mirror{size: slot}
		var tr transport.Transport = m
		if tc.channel {
			ch, err := NewMux(m, 0).Channel(0, []int{0, 1})
			if err != nil {
				t.Fatal(err)
			}
			tr = ch
		}
		g := NewGroup(tr, Options{})
		buf := make([]byte, tc.bytes)
		v := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), tc.bytes/4)
		for i := range v {
			v[i] = float32(i % 1000)
		}
		// The mirror holds one message: a second one each way would
		// leave the call waiting for a credit, until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum)
		cancel()
		if err != nil {
			t.Fatalf("%d bytes (channel %v): %v", tc.bytes, tc.channel, err)
		}
		if m.sent != tc.messages {
			t.Errorf("%d bytes (channel %v): %d messages sent, want %d", tc.bytes, tc.channel, m.sent, tc.messages)
		}
		for i := range v {
			if want := float32(2 * (i % 1000)); v[i] != want {
				t.Fatalf("%d bytes (channel %v): element %d is %v, want %v", tc.bytes, tc.channel, i, v[i], want)
			}
		}
	}
}

// TestJobLaneWithoutMuxHeader: a call's first message to a peer on the
// job's communicator (id 0) is its call header and payload alone, 16
// bytes fewer than on any other communicator, whose messages keep the
// lane header; either way the sum is right. A message with neither in
// front is refused as not the mux's.
func TestJobLaneWithoutMuxHeader(t *testing.T) {
	for _, tc := range []struct {
		id   uint64
		want int
	}{
		{0, hdrLen + 16},
		{5, MuxHeader + hdrLen + 16},
	} {
		m := &mirror{}
		ch, err := NewMux(m, 0).Channel(tc.id, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		g := NewGroup(ch, Options{})
		buf := make([]byte, 16)
		v := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), 4)
		copy(v, []float32{1, 2, 3, 4})
		if err := g.AllReduce(context.Background(), buf, reduce.Float32, reduce.Sum); err != nil {
			t.Fatalf("communicator %d: %v", tc.id, err)
		}
		if m.n != tc.want {
			t.Errorf("communicator %d: a 16-byte allreduce sent %d bytes, want %d", tc.id, m.n, tc.want)
		}
		if want := []float32{2, 4, 6, 8}; !slices.Equal(v, want) {
			t.Errorf("communicator %d: sum %v, want %v", tc.id, v, want)
		}
	}
	for _, b := range [][]byte{make([]byte, 64), []byte("GCMX")} {
		if l, _, ok := laneOf(b); ok {
			t.Errorf("% x taken for a message of lane %+v", b, l)
		}
	}
}
