package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// TestAbortTellsPeers: a rank that aborts tells its idle linked peers why
// before it resets, so that their errors carry the cause, not a bare
// reset; a peer whose link was mid-frame still sees the rank lost at
// once; and a peer never linked to it finds it lost at its first call.
// Over sealed links (Options.Encrypt) the abort frame is sealed too.
func TestAbortTellsPeers(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) {
			abortTellsPeers(t, tcp.Options{Encrypt: encrypt})
		})
	}
}

func abortTellsPeers(t *testing.T, opts tcp.Options) {
	ts := mesh(t, 4, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Rank 0 and rank 1 are linked (links are made on demand: a message
	// each way makes this one), then idle.
	if err := ts[0].Send(ctx, 1, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := ts[1].Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts[1].Release(m)

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

	_, err = ts[0].Recv(ctx, 1)
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

	// Rank 3 never linked to rank 1: its first call finds rank 1's door
	// shut, at once, and names it.
	start := time.Now()
	err = ts[3].Send(ctx, 1, []byte("late"))
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 1 {
		t.Errorf("never-linked peer: %v, want ErrPeerLost naming rank 1", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("never-linked peer learned after %v, want at once", took)
	}
	if l := ts[3].(*tcp.Transport).Links(); l != 0 {
		t.Errorf("rank 3 holds %d links, want none", l)
	}
}
