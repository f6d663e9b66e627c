package conformance

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/transport"
)

// PartSender checks transport.PartSender from ts[0] to ts[1], two ranks
// whose slabs hold 2 slots of slotSize bytes (at least 1100) per peer:
//   - head and body arrive as one message, small (inline where the
//     transport has such a thing) or large, with or without a head;
//   - not waiting, SendParts into a full ring sends nothing and says
//     false, and sends again once the receiver released a slot (a
//     transport may need a few calls to see the credit come back);
//   - waiting, it returns only once the receiver released a slot;
//   - a message over the slot size is refused, and after Close
//     SendParts fails with ErrClosed.
//
// It closes ts[0].
func PartSender(t *testing.T, ts []transport.Transport, slotSize int) {
	t.Helper()
	tx, rx, ctx, cancel := partPair(t, ts)
	defer cancel()
	part := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	// eventually retries a send that found no free slot, for as long as
	// the credit of a released one may take to come back.
	eventually := func(head, body []byte) (sent bool, err error) {
		for !sent && err == nil && ctx.Err() == nil {
			if sent, err = tx.SendParts(ctx, 1, head, body, false); !sent && err == nil {
				time.Sleep(time.Millisecond)
			}
		}
		return sent, err
	}
	for _, tc := range []struct {
		name       string
		head, body int
	}{
		{"small", 16, 8},
		{"small, no head", 0, 8},
		{"large", 16, 1000},
		{"large, no head", 0, 1000},
		{"full slot", 96, slotSize - 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want [][]byte
			for i := 0; i < 3; i++ {
				head, body := part(tc.head, byte(i)), part(tc.body, byte(100+i))
				var sent bool
				var err error
				if i < 2 {
					// The credits of the last subtest's messages may still
					// be on their way back.
					sent, err = eventually(head, body)
				} else {
					sent, err = tx.SendParts(ctx, 1, head, body, false)
				}
				switch {
				case err != nil:
					t.Fatalf("SendParts %d: %v", i, err)
				case i < 2 && !sent:
					t.Fatalf("SendParts %d found no free slot in a ring of 2", i)
				case i == 2 && sent:
					t.Fatalf("SendParts %d sent into a ring of 2 slots that are both taken", i)
				case sent:
					want = append(want, append(head, body...))
				}
			}
			for i := 0; i < len(want); i++ {
				m, err := rx.Recv(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(m.Data, want[i]) {
					t.Fatalf("message %d: got %d bytes, want head+body, %d bytes", i, len(m.Data), len(want[i]))
				}
				rx.Release(m)
				if i == 0 {
					if sent, err := eventually(nil, []byte{42}); !sent || err != nil {
						t.Fatalf("SendParts after a release: sent %v, err %v", sent, err)
					}
					want = append(want, []byte{42})
				}
			}
		})
	}
	// Waiting, into a full ring, it sends once a slot is released.
	for i := 0; i < 2; i++ {
		if sent, err := tx.SendParts(ctx, 1, []byte{1}, []byte{byte(i)}, true); !sent || err != nil {
			t.Fatalf("SendParts %d, waiting, into a ring with room: sent %v, err %v", i, sent, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		sent, err := tx.SendParts(ctx, 1, []byte{9}, bytes.Repeat([]byte{2}, 1000), true)
		if !sent && err == nil {
			err = errors.New("sent nothing, and no error")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("SendParts, waiting, returned (%v) while both of the peer's slots were taken", err)
	case <-time.After(100 * time.Millisecond):
	}
	for i := 0; i < 3; i++ {
		m, err := rx.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok := i < 2 && bytes.Equal(m.Data, []byte{1, byte(i)}) ||
			i == 2 && len(m.Data) == 1001 && m.Data[0] == 9 && m.Data[1000] == 2; !ok {
			t.Fatalf("message %d: %d bytes % x...", i, len(m.Data), m.Data[:min(len(m.Data), 4)])
		}
		rx.Release(m)
		if i == 0 {
			if err := <-done; err != nil {
				t.Fatalf("SendParts, waiting: %v", err)
			}
		}
	}
	if sent, err := tx.SendParts(ctx, 1, make([]byte, slotSize-96), make([]byte, 97), true); sent || err == nil {
		t.Fatalf("SendParts of %d bytes into %d-byte slots: sent %v, err %v; want an error", slotSize+1, slotSize, sent, err)
	}
	ts[0].Close()
	if sent, err := tx.SendParts(ctx, 1, nil, []byte{1}, true); sent || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("SendParts after Close: sent %v, err %v; want an error wrapping ErrClosed", sent, err)
	}
}

// AlignedBodies checks, from ts[0] to ts[1] (slabs of slotSize-byte
// slots, at least 1100), that the body of a large SendParts (the part
// behind the head: the mux's 16-byte header, or that and the call's 32)
// and a large plain Send's payload start 64-byte aligned in the message
// Recv hands out, where the reduce kernels read at full speed; and that
// every message, small ones and heads of any length, arrives intact.
// Shared memory places messages so; TCP lands a frame at its slot's
// start, where the kernel's copy into the slot writes aligned.
func AlignedBodies(t *testing.T, ts []transport.Transport, slotSize int) {
	t.Helper()
	tx, rx, ctx, cancel := partPair(t, ts)
	defer cancel()
	tests := []struct {
		name       string
		head, body int
		aligned    bool // the body must start on a 64-byte boundary
		plain      bool // sent with Send, head and body joined
	}{
		{"mux header", 16, 1000, true, false},
		{"mux and call headers", 48, 1000, true, false},
		{"no head", 0, 1000, true, false},
		{"plain send", 0, 1000, true, true},
		{"head of 70 bytes", 70, 1000, true, false},
		{"head of 64 bytes", 64, 1000, true, false},
		{"body filling the slot", 48, slotSize - 48, true, false},
		{"head of 120 bytes, 1-byte body", 120, 1, true, false},
		{"small, with head", 48, 8, false, false},
		{"empty", 0, 0, false, false},
	}
	for round := 0; round < 3; round++ { // every slot, and each again
		for i, tc := range tests {
			head, body := make([]byte, tc.head), make([]byte, tc.body)
			for j := range head {
				head[j] = byte(i + j)
			}
			for j := range body {
				body[j] = byte(round + 3*j)
			}
			var err error
			if tc.plain {
				err = ts[0].Send(ctx, 1, append(head, body...))
			} else {
				_, err = tx.SendParts(ctx, 1, head, body, true)
			}
			if err != nil {
				t.Fatalf("%s: send: %v", tc.name, err)
			}
			m, err := rx.Recv(ctx, 0)
			if err != nil {
				t.Fatalf("%s: recv: %v", tc.name, err)
			}
			if want := string(head) + string(body); string(m.Data) != want {
				t.Fatalf("%s: got %d bytes, want %d bytes: head and body", tc.name, len(m.Data), len(want))
			}
			if at := uintptr(unsafe.Pointer(unsafe.SliceData(m.Data))) + uintptr(tc.head); tc.aligned && at%64 != 0 {
				t.Errorf("%s: body at %d mod 64, want 0", tc.name, at%64)
			}
			rx.Release(m)
		}
	}
}

// partPair is ts[0] as a PartSender, ts[1], and the context the checks
// run under.
func partPair(t *testing.T, ts []transport.Transport) (transport.PartSender, transport.Transport, context.Context, context.CancelFunc) {
	t.Helper()
	tx, ok := ts[0].(transport.PartSender)
	if !ok {
		t.Fatalf("%T does not implement transport.PartSender", ts[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	return tx, ts[1], ctx, cancel
}
