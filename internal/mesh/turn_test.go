package mesh

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// TestAwait: a free engine is driven until ready; a call that finds it
// taken waits and looks again when told, or ends with ctx's error or
// ErrClosed; a drive's error ends the wait and gives the token back.
func TestAwait(t *testing.T) {
	never := make(chan struct{})
	no := func() bool { return false }
	progress := make(chan struct{}, 1)
	var drives atomic.Int32
	ready := func() bool { return drives.Load() >= 3 }
	drive := func() error { drives.Add(1); return nil }
	if err := Await(context.Background(), progress, never, never, never, ready, no, drive); err != nil || drives.Load() != 3 {
		t.Fatalf("free engine: %v after %d drives, want nil after 3", err, drives.Load())
	}
	boom := errors.New("boom")
	if err := Await(context.Background(), progress, never, never, never, no, no, func() error { return boom }); err != boom {
		t.Fatalf("drive failing: %v, want its error", err)
	}
	if len(progress) != 0 {
		t.Fatal("the token was not given back")
	}

	progress <- struct{}{} // another call drives
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Await(canceled, progress, never, never, never, no, no, drive); !errors.Is(err, context.Canceled) {
		t.Errorf("ctx ended: %v, want context.Canceled", err)
	}
	closed := make(chan struct{})
	close(closed)
	if err := Await(context.Background(), progress, closed, never, never, no, no, drive); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
	// Told to look again, the call finds its peer lost.
	dead := make(chan struct{})
	var lost atomic.Bool
	go func() { time.Sleep(10 * time.Millisecond); lost.Store(true); close(dead) }()
	if err := Await(context.Background(), progress, never, never, dead, no, lost.Load, drive); err != nil || !lost.Load() {
		t.Errorf("peer lost: %v (lost %v), want nil with the loss seen", err, lost.Load())
	}
	// The token given back while a call waits is that call's.
	done := make(chan error)
	drives.Store(2)
	go func() { done <- Await(context.Background(), progress, never, never, never, ready, no, drive) }()
	time.Sleep(10 * time.Millisecond)
	<-progress
	if err := <-done; err != nil || drives.Load() != 3 {
		t.Errorf("after the token came back: %v after %d drives", err, drives.Load())
	}
}

// TestEnded: nil while both go on; ctx's error first, then ErrClosed.
func TestEnded(t *testing.T) {
	closed := make(chan struct{})
	if err := Ended(context.Background(), closed); err != nil {
		t.Fatalf("Ended while open = %v", err)
	}
	close(closed)
	if err := Ended(context.Background(), closed); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ended once closed = %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Ended(ctx, closed); !errors.Is(err, context.Canceled) {
		t.Errorf("Ended with ctx over = %v, want context.Canceled", err)
	}
}
