package tcp_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

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
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]transport.Transport, n)
	stores := make([]*bootstrap.Client, n)
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
			// Links are made on demand, through the store: it stays open
			// as long as the transport.
			stores[r] = store
			tr, err := tcp.Connect(ctx, store, r, n, token, opts)
			if err != nil {
				errs[r] = err
				return
			}
			ts[r] = tr
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func(tr transport.Transport) { defer wg.Done(); tr.Close() }(tr)
			}
		}
		wg.Wait()
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport { return mesh(t, n, tcp.Options{}) })
}

// TestConformanceSmallSlots runs the suite with the smallest slots and
// fewest of them, so that every size spans many messages and senders wait
// on credits all the time.
func TestConformanceSmallSlots(t *testing.T) {
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport {
		return mesh(t, n, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}})
	})
}

// TestSendParts runs the PartSender checks over TCP: header and payload
// leave in one writev, and arrive as one message.
func TestSendParts(t *testing.T) {
	conformance.PartSender(t, mesh(t, 2, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 8 << 10}}), 8<<10)
}
