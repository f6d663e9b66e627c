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
// every peer in the order reported.
func TestLoss(t *testing.T) {
	l := NewLoss()
	if err := l.Err(); err != nil {
		t.Fatalf("Err before any loss = %v", err)
	}
	l.Report(3, "link to", transport.ErrPeerLost)
	<-l.Lost()
	var pe *transport.PeerError
	if err := l.Err(); !errors.As(err, &pe) || pe.Peer != 3 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Err after one loss = %v, want rank 3's PeerError", err)
	}
	l.Report(1, "connect to", transport.ErrPeerClosed)
	var ls transport.Losses
	if err := l.Err(); !errors.As(err, &ls) || len(ls) != 2 || ls[0].Peer != 3 || ls[1].Peer != 1 {
		t.Fatalf("Err after two losses = %v, want ranks 3 then 1", err)
	}
}

// TestAddress: a rank whose address the store cannot give is lost.
func TestAddress(t *testing.T) {
	srv, err := bootstrap.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := bootstrap.Dial(ctx, srv.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Put(ctx, "rank 2", []byte("127.0.0.1:9")); err != nil {
		t.Fatal(err)
	}
	if addr, err := Address(ctx, store, "rank 2", 2); err != nil || addr != "127.0.0.1:9" {
		t.Fatalf("Address of a published rank = %q, %v", addr, err)
	}
	// A key never put: the store's Get waits until ctx ends.
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	_, err = Address(short, store, "rank 4", 4)
	if !errors.Is(err, transport.ErrPeerLost) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Address of a rank never published = %v, want ErrPeerLost wrapping the deadline", err)
	}
}
