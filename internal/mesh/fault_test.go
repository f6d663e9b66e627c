package mesh

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// TestFault: the first cause wins, is announced to the loss record
// before Dead closes, and names the peer.
func TestFault(t *testing.T) {
	loss := NewLoss(0)
	f := NewFault(3)
	if f.Failed() != nil {
		t.Fatal("a new link has failed")
	}
	first := errors.New("reset")
	var wg sync.WaitGroup
	firsts := make(chan bool, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cause := first
			if i > 0 {
				<-f.Dead()
				cause = errors.New("later")
			}
			if i == 0 {
				firsts <- f.Fail(fmtLost(cause), loss)
				return
			}
			// Woken by Dead: the loss is announced already.
			if loss.LostErr() == nil {
				t.Error("Dead closed before the loss was announced")
			}
			firsts <- f.Fail(cause, loss)
		}()
	}
	wg.Wait()
	close(firsts)
	n := 0
	for ok := range firsts {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d first causes, want 1", n)
	}
	if err := f.Failed(); !errors.Is(err, first) {
		t.Errorf("Failed = %v, want the first cause", err)
	}
	var pe *transport.PeerError
	if err := f.Error("send to"); !errors.As(err, &pe) || pe.Peer != 3 || pe.Op != "send to" || !errors.Is(err, first) {
		t.Errorf("Error = %v, want rank 3's send error wrapping the first cause", err)
	}
	if ls := loss.LostErr(); !errors.As(ls, &pe) || pe.Peer != 3 {
		t.Errorf("LostErr = %v, want rank 3 alone", ls)
	}
}

func fmtLost(err error) error { return errors.Join(transport.ErrPeerLost, err) }

// TestReceive: messages already delivered come first, even after the
// link failed; then the failure, named; an error from the wait is the
// call's.
func TestReceive(t *testing.T) {
	ready := make(chan transport.Message, 2)
	f := NewFault(1)
	waits := 0
	await := func(arrived func() bool) error {
		waits++
		ready <- transport.Message{Peer: 1, Slot: int32(waits)}
		if !arrived() {
			t.Error("a message queued, and the wait does not see it")
		}
		return nil
	}
	if m, err := Receive(ready, &f, await); err != nil || m.Slot != 1 || waits != 1 {
		t.Fatalf("Receive = %+v, %v after %d waits, want slot 1 after one", m, err, waits)
	}
	ready <- transport.Message{Peer: 1, Slot: 7}
	f.Fail(transport.ErrPeerClosed, nil)
	if m, err := Receive(ready, &f, await); err != nil || m.Slot != 7 {
		t.Fatalf("Receive after the failure = %+v, %v, want the message delivered before", m, err)
	}
	var pe *transport.PeerError
	if _, err := Receive(ready, &f, await); !errors.As(err, &pe) || pe.Op != "recv from" || !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Receive on a failed link = %v, want its failure", err)
	}
	g := NewFault(2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := Receive(make(chan transport.Message), &g, func(func() bool) error { <-ctx.Done(); return ctx.Err() })
	if !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive whose wait timed out = %v, want rank 2's deadline", err)
	}
}

// TestArrivals: what was added is taken once, in order.
func TestArrivals(t *testing.T) {
	var a Arrivals[int]
	if got := a.Take(); got != nil {
		t.Fatalf("Take of nothing = %v", got)
	}
	one, two := 1, 2
	a.Add(&one)
	a.Add(&two)
	if got := a.Take(); len(got) != 2 || *got[0] != 1 || *got[1] != 2 {
		t.Fatalf("Take = %v, want 1 and 2", got)
	}
	if got := a.Take(); got != nil {
		t.Fatalf("second Take = %v, want nothing", got)
	}
}
