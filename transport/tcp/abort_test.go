package tcp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// TestAbortTellsPeers: a rank that aborts tells its idle peers why before
// it resets, so that their errors carry the cause, not a bare reset; and a
// peer whose link was mid-frame still sees the rank lost at once.
func TestAbortTellsPeers(t *testing.T) {
	ts := mesh(t, 3, tcp.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Rank 1 is part-way through a large send to rank 2, which is not
	// reading: that link is mid-frame when the abort comes.
	sending := make(chan error, 1)
	go func() {
		big := make([]byte, ts[1].MaxMessage())
		var err error
		for err == nil {
			err = ts[1].Send(ctx, 2, big)
		}
		sending <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cause := errors.New("allreduce #7: recv from rank 5: peer lost")
	if err := ts[1].(transport.Aborter).Abort(cause); err != nil {
		t.Fatal(err)
	}
	if err := <-sending; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("the aborting rank's own send: %v, want ErrClosed", err)
	}

	_, err := ts[0].Recv(ctx, 1)
	want := "rank 1 gave up: " + cause.Error()
	if !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), want) {
		t.Errorf("idle peer: %v, want ErrPeerLost saying %q", err, want)
	}
	ln := ts[0].(transport.LossNotifier)
	select {
	case <-ln.Lost():
	case <-ctx.Done():
		t.Fatal("Lost never closed")
	}
	if err := ln.LostErr(); !strings.Contains(err.Error(), want) {
		t.Errorf("LostErr = %v, want it to say %q", err, want)
	}

	// Rank 2 drains what landed, then finds the link gone: with or without
	// the cause (its link was busy), never a hang.
	for {
		m, err := ts[2].Recv(ctx, 1)
		if err != nil {
			if !errors.Is(err, transport.ErrPeerLost) {
				t.Errorf("busy peer: %v, want ErrPeerLost", err)
			}
			break
		}
		ts[2].Release(m)
	}
}
