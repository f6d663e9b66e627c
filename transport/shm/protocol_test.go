//go:build linux

package shm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
)

// pair connects two in-process ranks through a real store, linked at
// Connect (Eager), with o's options.
func pair(t *testing.T, o transport.LinkOptions) [2]*Transport {
	t.Helper()
	return pairWith(t, Options{LinkOptions: o})
}

// pairWith is pair with the transport's own options too.
func pairWith(t *testing.T, opts Options) [2]*Transport {
	t.Helper()
	token := []byte("protocol-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Eager = true
	var ts [2]*Transport
	var errs [2]error
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			defer store.Close()
			ts[r], errs[r] = Connect(ctx, store, r, 2, token, opts)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() { ts[0].Close(); ts[1].Close() })
	return ts
}

// smallRings are the rings of the protocol tests: two slots of 4 KiB.
var smallRings = transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}

// TestCorruptRing has a peer break the ring protocol by writing what a
// correct sender or receiver never would: the victim must report the peer
// lost with a protocol violation, not panic, hang or read out of bounds.
func TestCorruptRing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := []struct {
		name    string
		corrupt func(out *ring) // applied to rank 1's ring to rank 0
		victim  func(ts [2]*Transport) error
	}{
		{"length beyond the slot", func(out *ring) {
			*out.len(0) = 1 << 20
			out.seq(0).Store(1)
		}, func(ts [2]*Transport) error { _, err := ts[0].Recv(ctx, 1); return err }},
		{"lead beyond the slot header", func(out *ring) {
			*out.len(0) = inlineMax + 1
			*out.lead(0) = 64
			out.seq(0).Store(1)
		}, func(ts [2]*Transport) error { _, err := ts[0].Recv(ctx, 1); return err }},
		{"sequence from the future", func(out *ring) {
			out.seq(0).Store(7)
		}, func(ts [2]*Transport) error { _, err := ts[0].Recv(ctx, 1); return err }},
		{"more releases than sends", func(out *ring) {}, func(ts [2]*Transport) error {
			// Rank 0 (receiver of this ring) claims releases it never had:
			// rank 1, the sender, must refuse to believe it.
			ts[1].lookup(0).out.head.Store(5)
			ts[1].lookup(0).headSeen = 0
			for i := 0; i < 3; i++ {
				if err := ts[1].Send(ctx, 0, []byte("x")); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := pair(t, smallRings)
			tc.corrupt(ts[1].lookup(0).out)
			err := tc.victim(ts)
			if !errors.Is(err, transport.ErrPeerLost) || !errors.Is(err, errProtocol) {
				t.Fatalf("got %v, want ErrPeerLost for a protocol violation", err)
			}
			var pe *transport.PeerError
			if !errors.As(err, &pe) {
				t.Fatalf("%v does not name the peer", err)
			}
			t.Log(err)
		})
	}
}

// TestControlMessages: the control-socket parser acts on whole messages
// only, however the bytes are split between reads, and fails the peer on
// anything it does not know.
func TestControlMessages(t *testing.T) {
	abort := func(why string) []byte {
		return append([]byte{ctlAbort, byte(len(why)), byte(len(why) >> 8)}, why...)
	}
	tests := []struct {
		name    string
		stream  []byte
		bye     bool
		errText string // "" : the peer must still be healthy
	}{
		{name: "goodbye", stream: []byte{ctlBye}, bye: true},
		{name: "abort", stream: abort("rank 5 died"), errText: "rank 3 gave up: rank 5 died"},
		{name: "abort masks control characters", stream: abort("a\nb\x00"), errText: "rank 3 gave up: a?b?"},
		{name: "partial abort waits", stream: abort("rank 5 died")[:6]},
		{name: "oversized abort", stream: []byte{ctlAbort, 0xff, 0xff}, errText: "abort notice of 65535 bytes"},
		{name: "stranger byte", stream: []byte{'x'}, errText: "unexpected byte 0x78"},
	}
	for _, tt := range tests {
		// Every split of the stream into two reads must end the same way.
		for cut := 0; cut <= len(tt.stream); cut++ {
			var pending []byte
			var err error
			bye := false
			for _, part := range [][]byte{tt.stream[:cut], tt.stream[cut:]} {
				pending = append(pending, part...)
				used, gotBye, cerr := control(3, pending, bye)
				bye, pending = gotBye, pending[used:]
				if err == nil {
					err = cerr
				}
			}
			switch {
			case bye != tt.bye:
				t.Errorf("%s, cut at %d: goodbye %v, want %v", tt.name, cut, bye, tt.bye)
			case tt.errText == "" && err != nil:
				t.Errorf("%s, cut at %d: peer failed: %v", tt.name, cut, err)
			case tt.errText != "" && (err == nil || !strings.Contains(err.Error(), tt.errText) || !errors.Is(err, transport.ErrPeerLost)):
				t.Errorf("%s, cut at %d: err %v, want ErrPeerLost saying %q", tt.name, cut, err, tt.errText)
			}
		}
	}
}

// TestSequenceWrap runs a stream across the point where message numbers
// pass 2^32 and the 32-bit sequence words in the slots wrap to zero, both
// inline messages and ones in the slot body: nothing may mistake the
// wrapped word for an empty slot or a protocol violation.
func TestSequenceWrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := pair(t, smallRings)
	start := uint64(1)<<32 - 5
	tx, rx := ts[1].lookup(0), ts[0].lookup(1)
	r := tx.out
	// Put the ring where it would be after start messages, all released:
	// each slot holds the last message a lap before.
	for i := uint64(0); i < r.slots; i++ {
		m := start - r.slots + (i-start%r.slots+r.slots)%r.slots
		r.seq(i).Store(uint32(m + 1))
	}
	r.head.Store(start)
	tx.sendSeq, tx.headSeen, rx.recvSeq = start, start, start
	for n := 0; n < 12; n++ {
		size := 1 + n%2*(inlineMax+1) // inline, then in the slot body
		msg := make([]byte, size)
		for i := range msg {
			msg[i] = byte(n + i)
		}
		if err := ts[1].Send(ctx, 0, msg); err != nil {
			t.Fatalf("send %d (message number %#x): %v", n, start+uint64(n), err)
		}
		got, err := ts[0].Recv(ctx, 1)
		if err != nil {
			t.Fatalf("recv %d (message number %#x): %v", n, start+uint64(n), err)
		}
		if string(got.Data) != string(msg) {
			t.Fatalf("message %d: got %d bytes %x, want %x", n, len(got.Data), got.Data, msg)
		}
		ts[0].Release(got)
	}
	if rx.recvSeq != start+12 || r.head.Load() != start+12 {
		t.Fatalf("after 12 messages: received %#x, released %#x, want %#x", rx.recvSeq, r.head.Load(), start+12)
	}
}

// TestPlacement sends messages of two parts, on both sides of the inline
// limit, through real rings: the receiver must get head and body as one
// message, byte for byte, from where the slot header says; past the
// limit the body must start on a 64-byte boundary, with the lead the
// sender recorded once the body was in.
func TestPlacement(t *testing.T) {
	ts := pair(t, smallRings)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		name       string
		head, body int
	}{
		{"empty", 0, 0},
		{"one line", 32, 24},
		{"inline, a call header in front", 32, 256},
		{"largest inline", 32, inlineMax - 32},
		{"smallest past the limit", 32, inlineMax - 31},
		{"past the limit, no head", 0, 1000},
		{"past the limit, a 48-byte head", 48, 1000},
		{"past the limit, a 63-byte head", 63, 600},
		{"past the limit, a 64-byte head", 64, 600},
		{"past the limit, a 100-byte head", 100, 3000},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := make([]byte, tt.head+tt.body)
			for j := range want {
				want[j] = byte(i*31 + j*7 + 1)
			}
			if sent, err := ts[0].SendParts(ctx, 1, want[:tt.head], want[tt.head:], true); !sent || err != nil {
				t.Fatalf("SendParts: sent %v, %v", sent, err)
			}
			m, err := ts[1].Recv(ctx, 0)
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			defer ts[1].Release(m)
			if string(m.Data) != string(want) {
				t.Fatalf("received %d bytes that differ from the %d sent", len(m.Data), len(want))
			}
			in := ts[1].lookup(0).in
			slot := uint64(m.Slot)
			if n := int(*in.len(slot)); n != len(want) {
				t.Errorf("slot header length %d, want %d", n, len(want))
			}
			if len(want) <= inlineMax {
				return
			}
			if lead := int(*in.lead(slot)); lead != tt.head&63 {
				t.Errorf("recorded lead %d, want %d (the head's length mod 64)", lead, tt.head&63)
			}
			body := uintptr(unsafe.Pointer(unsafe.SliceData(m.Data))) + uintptr(tt.head)
			if body%64 != 0 {
				t.Errorf("the body starts %d bytes past a 64-byte boundary", body%64)
			}
		})
	}
}
