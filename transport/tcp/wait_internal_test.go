//go:build unix

package tcp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// TestWaitSharesTheSoleP: a spinning receive of a rank whose process has
// a single P lets the goroutine it waits for run, as shm's wait does
// (conformance.SoleP): here that goroutine is the very one whose Send
// the receive waits for, rank 1 of an in-process job, and its message
// must arrive within mesh.SolePolls polls (crowded: 64, which is
// shorter). A wait that never gave the scheduler a turn (before, on a
// rank with a core to itself) kept the P until the runtime preempted it.
func TestWaitSharesTheSoleP(t *testing.T) {
	token := []byte("wait-token")
	payload := []byte("the message the wait waits for")
	for _, crowded := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A spin far longer than the test: the wait never blocks in
		// poll(2), so only the turns it gives let the sender run.
		opts := Options{LinkOptions: transport.LinkOptions{Spin: time.Hour, Crowded: crowded, Slots: 16}}
		ts := conformance.Job(t, 2, token, func(ctx context.Context, store *bootstrap.Client, r int) (*Transport, error) {
			return Connect(ctx, store, r, 2, token, opts)
		})
		send := func() chan error {
			sent := make(chan error, 1)
			go func() { sent <- ts[1].Send(ctx, 0, payload) }()
			return sent
		}
		// Each message taken and checked; the first links the pair, with
		// every P, so that the rounds wait for the message alone.
		recv := func(sent chan error) error {
			if err := <-sent; err != nil {
				return fmt.Errorf("rank 1's send: %w", err)
			}
			m, err := ts[0].Recv(ctx, 1)
			if err != nil {
				return err
			}
			defer ts[0].Release(m)
			if string(m.Data) != string(payload) {
				return fmt.Errorf("received %q, want %q", m.Data, payload)
			}
			return nil
		}
		if err := recv(send()); err != nil {
			t.Fatal(err)
		}
		p := ts[0].links.Get(1)
		within := mesh.SolePolls
		if crowded {
			within = 64
		}
		conformance.SoleP(t, within, func(_ int, poll func()) error {
			sent := send()
			err := ts[0].drive(ctx, p, func() bool {
				poll()
				return len(p.ready) > 0
			})
			if err != nil {
				return err
			}
			return recv(sent)
		})
	}
}
