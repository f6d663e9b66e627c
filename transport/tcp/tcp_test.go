package tcp_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// mesh connects n in-process ranks over loopback TCP through a real
// rendezvous store, exactly as separate processes would.
func mesh(t testing.TB, n int, opts tcp.Options) []transport.Transport {
	t.Helper()
	if opts.Spin == 0 {
		opts.Crowded = opts.Crowded || n > runtime.NumCPU() // all n ranks share this process's cores
	}
	token := []byte("conformance-token")
	return conformance.Job(t, n, token, func(ctx context.Context, store *bootstrap.Client, r int) (transport.Transport, error) {
		tr, err := tcp.Connect(ctx, store, r, n, token, opts)
		if err != nil {
			return nil, err
		}
		return tr, nil
	})
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport { return mesh(t, n, tcp.Options{}) })
}

// TestConformanceSmallSlots runs the suite with the smallest slots and
// fewest of them, so that every size spans many messages and senders wait
// on credits all the time.
func TestConformanceSmallSlots(t *testing.T) {
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport {
		return mesh(t, n, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}})
	})
}

// TestSendParts runs the PartSender checks over TCP: header and payload
// leave in one writev, and arrive as one message.
func TestSendParts(t *testing.T) {
	conformance.PartSender(t, mesh(t, 2, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 8 << 10}}), 8<<10)
}
