package mesh

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
)

// TestDoor: Serve hands each connection to admit, counts the refusals
// admit reports, and ends when the listener closes.
func TestDoor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDoor("test", 0)
	life, end := context.WithCancel(context.Background())
	defer end()
	var wg sync.WaitGroup
	spawn := func(f func()) bool { wg.Add(1); go func() { defer wg.Done(); f() }(); return true }
	stranger := errors.New("no token")
	served := make(chan struct{})
	go func() {
		d.Serve(life, ln, spawn, func(c net.Conn) {
			d.Release()
			d.Refuse(life, c.RemoteAddr(), stranger)
			c.Close()
		})
		close(served)
	}()
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Read(make([]byte, 1)) // until admit closes it
		c.Close()
	}
	wg.Wait()
	if got := d.Refused(); got != 3 {
		t.Errorf("Refused = %d after 3 strangers, want 3", got)
	}
	ln.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not end when its listener closed")
	}
	end()
	d.Refuse(life, nil, stranger)
	if got := d.Refused(); got != 3 {
		t.Errorf("a refusal after life ended was counted: %d", got)
	}
	if got := (*Door)(nil).Refused(); got != 0 {
		t.Errorf("a nil door refused %d", got)
	}
}

// TestLoss: no loss until the first report, then the one peer, then
// every peer in the order reported; a peer that closed in good order is
// no loss, a loss is announced after the grace, and nothing is recorded
// once the record is stopped.
func TestLoss(t *testing.T) {
	l := NewLoss(0)
	if err := l.LostErr(); err != nil {
		t.Fatalf("LostErr before any loss = %v", err)
	}
	l.Note(2, transport.ErrPeerClosed)
	select {
	case <-l.Lost():
		t.Fatal("a peer that closed in good order was lost")
	default:
	}
	l.Note(3, transport.ErrPeerLost)
	<-l.Lost()
	var pe *transport.PeerError
	if err := l.LostErr(); !errors.As(err, &pe) || pe.Peer != 3 || pe.Op != "link to" || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("LostErr after one loss = %v, want rank 3's PeerError", err)
	}
	l.Report(1, "connect to", transport.ErrPeerClosed)
	var ls transport.Losses
	if err := l.LostErr(); !errors.As(err, &ls) || len(ls) != 2 || ls[0].Peer != 3 || ls[1].Peer != 1 {
		t.Fatalf("LostErr after two losses = %v, want ranks 3 then 1", err)
	}
	l.Stop()
	l.Report(5, "connect to", transport.ErrPeerLost)
	if err := l.LostErr(); !errors.As(err, &ls) || len(ls) != 2 {
		t.Fatalf("LostErr after a report past Stop = %v, want the two losses before", err)
	}
	(*Loss)(nil).Note(1, transport.ErrPeerLost) // a peer outside any transport

	late := NewLoss(30 * time.Millisecond)
	start := time.Now()
	late.Note(4, transport.ErrPeerLost)
	if late.LostErr() != nil {
		t.Fatal("a loss was announced before its grace")
	}
	select {
	case <-late.Lost():
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Errorf("announced after %v, within the grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a loss was never announced")
	}
	stopped := NewLoss(20 * time.Millisecond)
	stopped.Note(4, transport.ErrPeerLost)
	stopped.Stop()
	time.Sleep(60 * time.Millisecond)
	if err := stopped.LostErr(); err != nil {
		t.Fatalf("a loss announced after Stop: %v", err)
	}
}

// newStore is a rendezvous store on loopback, and a client of it, for
// the test's life; ctx bounds the test.
func newStore(t *testing.T) (context.Context, *bootstrap.Client) {
	srv, err := bootstrap.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	store, err := bootstrap.Dial(ctx, srv.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return ctx, store
}

// TestAddress: a rank whose address the store cannot give is lost.
func TestAddress(t *testing.T) {
	ctx, store := newStore(t)
	if err := store.Put(ctx, "rank 2", []byte("127.0.0.1:9")); err != nil {
		t.Fatal(err)
	}
	if addr, err := Address(ctx, store, "rank 2", 2); err != nil || addr != "127.0.0.1:9" {
		t.Fatalf("Address of a published rank = %q, %v", addr, err)
	}
	// A key never put: the store's Get waits until ctx ends.
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	_, err := Address(short, store, "rank 4", 4)
	if !errors.Is(err, transport.ErrPeerLost) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Address of a rank never published = %v, want ErrPeerLost wrapping the deadline", err)
	}
}

// TestDial: a published listener is reached; one that closed refuses,
// which loses the peer, as does an address never published.
func TestDial(t *testing.T) {
	ctx, store := newStore(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, "rank 1", []byte(ln.Addr().String())); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, store, "rank 1", 1, "tcp", time.Second)
	if err != nil {
		t.Fatalf("Dial of a listening rank: %v", err)
	}
	c.Close()
	ln.Close()
	if _, err := Dial(ctx, store, "rank 1", 1, "tcp", time.Second); !errors.Is(err, transport.ErrPeerLost) {
		t.Errorf("Dial of a closed listener = %v, want ErrPeerLost", err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := Dial(short, store, "rank 2", 2, "tcp", time.Second); !errors.Is(err, transport.ErrPeerLost) {
		t.Errorf("Dial of a rank never published = %v, want ErrPeerLost", err)
	}
}
