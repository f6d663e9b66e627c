//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
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
	return conformance.Job(t, n, token, func(ctx context.Context, store *bootstrap.Client, r int) (*shm.Transport, error) {
		return shm.Connect(ctx, store, r, n, token, opts)
	})
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
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport {
		return asTransports(mesh(t, n, shm.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}}))
	})
}

// TestMessageLengths sends every length from 0 to past inlineMax, and one
// byte short of and at a full slot: short messages start inside the slot
// header (the longer of them running on into the body), longer ones at
// the body, and each must come
// out with its own length and bytes, whichever slot of the ring it used.
// A slot size that is not a whole number of 128-byte line pairs must work
// too.
func TestMessageLengths(t *testing.T) {
	for _, slotSize := range []int{0, 4<<10 + 64} {
		t.Run(fmt.Sprintf("slot=%d", slotSize), func(t *testing.T) {
			testMessageLengths(t, mesh(t, 2, shm.Options{LinkOptions: transport.LinkOptions{Slots: 3, SlotSize: slotSize}}))
		})
	}
}

func testMessageLengths(t *testing.T, ts []*shm.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lengths := []int{ts[0].MaxMessage() - 1, ts[0].MaxMessage()}
	for n := 0; n <= 600; n++ { // across both places a message may start
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

// TestSendParts runs the PartSender checks over shared memory.
func TestSendParts(t *testing.T) {
	conformance.PartSender(t, asTransports(mesh(t, 2, shm.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4096}})), 4096)
}

// TestAlignedBodies: a large message's body lands 64-byte aligned in the
// ring, behind heads of every length the mux sends.
func TestAlignedBodies(t *testing.T) {
	conformance.AlignedBodies(t, asTransports(mesh(t, 2, shm.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4096}})), 4096)
}
