//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
)

// mesh connects n in-process ranks over shared memory through a real
// rendezvous store, exactly as separate processes would.
func mesh(t testing.TB, n int, opts shm.Options) []*shm.Transport {
	t.Helper()
	if opts.Spin == 0 {
		opts.Crowded = opts.Crowded || n > runtime.NumCPU() // all n ranks share this process's cores
	}
	token := []byte("conformance-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]*shm.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			defer store.Close()
			ts[r], errs[r] = shm.Connect(ctx, store, r, n, token, opts)
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func(tr *shm.Transport) { defer wg.Done(); tr.Close() }(tr)
			}
		}
		wg.Wait()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts
}

func asTransports(ts []*shm.Transport) []transport.Transport {
	out := make([]transport.Transport, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport { return asTransports(mesh(t, n, shm.Options{})) })
}

// TestConformanceSmallSlots runs the suite with the smallest slots and
// fewest of them, so that every size spans many messages and senders wait
// on credits all the time.
func TestConformanceSmallSlots(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport {
		return asTransports(mesh(t, n, shm.Options{Slots: 2, SlotSize: 4 << 10}))
	})
}

// TestMessageLengths sends every length from 0 to past the slot header
// twice over, and one byte short of and at a full slot: short messages
// travel inside the slot header, longer ones after it, and each must come
// out with its own length and bytes, whichever slot of the ring it used.
// A slot size that is not a whole number of 128-byte line pairs must work
// too.
func TestMessageLengths(t *testing.T) {
	for _, slotSize := range []int{0, 4<<10 + 64} {
		t.Run(fmt.Sprintf("slot=%d", slotSize), func(t *testing.T) {
			testMessageLengths(t, mesh(t, 2, shm.Options{Slots: 3, SlotSize: slotSize}))
		})
	}
}

func testMessageLengths(t *testing.T, ts []*shm.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lengths := []int{ts[0].MaxMessage() - 1, ts[0].MaxMessage()}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	pattern := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(n*31 + i*7 + 1)
		}
		return b
	}
	errc := make(chan error, 1)
	go func() {
		for _, n := range lengths {
			if err := ts[0].Send(ctx, 1, pattern(n)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for _, n := range lengths {
		msg, err := ts[1].Recv(ctx, 0)
		if err != nil {
			t.Fatalf("receive the %d-byte message: %v", n, err)
		}
		if !bytes.Equal(msg.Data, pattern(n)) {
			t.Fatalf("a %d-byte message arrived as %d bytes, or with other bytes", n, len(msg.Data))
		}
		ts[1].Release(msg)
	}
	if err := <-errc; err != nil {
		t.Fatalf("send: %v", err)
	}
}

// TestSendParts: SendParts delivers head and body as one message while
// the peer has free slots; not waiting, it says false and sends nothing
// once they are all taken, and sends again once the receiver releases
// one; waiting, it sends once the receiver does.
func TestSendParts(t *testing.T) {
	ts := mesh(t, 2, shm.Options{Slots: 2, SlotSize: 4096})
	ctx := context.Background()
	part := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	for _, tc := range []struct {
		name       string
		head, body int
	}{
		{"inline", 16, 8},
		{"in the slot body", 16, 1000},
		{"no head", 0, 64},
		{"full slot", 96, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want [][]byte
			for i := 0; ; i++ {
				head, body := part(tc.head, byte(i)), part(tc.body, byte(100+i))
				sent, err := ts[0].SendParts(ctx, 1, head, body, false)
				if err != nil {
					t.Fatalf("SendParts %d: %v", i, err)
				}
				if !sent {
					if i != 2 {
						t.Fatalf("SendParts %d said no free slot; the ring has 2", i)
					}
					break
				}
				if i == 2 {
					t.Fatalf("SendParts %d sent into a ring of 2 slots that are both taken", i)
				}
				want = append(want, append(head, body...))
			}
			for i := 0; i < len(want); i++ {
				w := want[i]
				m, err := ts[1].Recv(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(m.Data, w) {
					t.Fatalf("message %d: got %d bytes, want head+body, %d bytes", i, len(m.Data), len(w))
				}
				ts[1].Release(m)
				if i == 0 {
					if sent, err := ts[0].SendParts(ctx, 1, nil, nil, false); !sent || err != nil {
						t.Fatalf("SendParts after a release: sent %v, err %v", sent, err)
					}
					want = append(want, []byte{})
				}
			}
		})
	}
	// Waiting, it sends once the receiver releases a slot.
	for i := 0; i < 2; i++ {
		if sent, err := ts[0].SendParts(ctx, 1, []byte{1}, []byte{byte(i)}, false); !sent || err != nil {
			t.Fatalf("SendParts %d into an empty ring: sent %v, err %v", i, sent, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		sent, err := ts[0].SendParts(ctx, 1, []byte{1}, []byte{2}, true)
		if !sent && err == nil {
			err = errors.New("sent nothing, and no error")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("SendParts, waiting, returned (%v) before the receiver freed a slot of the full ring", err)
	case <-time.After(50 * time.Millisecond):
	}
	for i := 0; i < 3; i++ {
		m, err := ts[1].Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Data) != 2 || m.Data[0] != 1 || m.Data[1] != byte(i) {
			t.Fatalf("message %d: % x, want 01 %02x", i, m.Data, i)
		}
		ts[1].Release(m)
		if i == 0 {
			if err := <-done; err != nil {
				t.Fatalf("SendParts, waiting: %v", err)
			}
		}
	}
	if _, err := ts[0].SendParts(ctx, 1, make([]byte, 4000), make([]byte, 97), false); err == nil {
		t.Fatal("SendParts of 4097 bytes into 4096-byte slots succeeded")
	}
	ts[0].Close()
	if sent, err := ts[0].SendParts(ctx, 1, nil, []byte{1}, true); sent || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("SendParts after Close: sent %v, err %v; want an error wrapping ErrClosed", sent, err)
	}
}
