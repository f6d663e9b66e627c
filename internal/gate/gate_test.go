package gate

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
)

// lockedBuffer is a log destination several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve runs a listener the way the store and the transports do: a slot
// before each accept, the handshake under a deadline, the slot back after.
func serve(ln net.Listener, g *Gate, token []byte, deadline time.Duration, ok chan<- struct{}) {
	ctx := context.Background()
	for g.Acquire(ctx) {
		c, err := ln.Accept()
		if err != nil {
			g.Release()
			return
		}
		go func() {
			defer g.Release()
			if err := auth.Handshake(c, token, auth.Store, false, time.Now().Add(deadline)); err != nil {
				g.Refuse(c.RemoteAddr(), err)
				c.Close()
				return
			}
			ok <- struct{}{}
			c.Close()
		}()
	}
}

// TestGateFlood opens a few hundred strangers' connections on loopback
// (idle ones, garbage, wrong tokens), a bounded loop that ends by itself:
// no more than the gate's slots are ever authenticating at once, every
// stranger is refused within the deadline, a real client is still served,
// and the log says it all in two lines.
func TestGateFlood(t *testing.T) {
	const (
		slots     = 8
		strangers = 300
		deadline  = 200 * time.Millisecond
	)
	token := []byte("the job's token, 32 bytes long..")
	var logs lockedBuffer
	g := New("rendezvous", slots, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)), "rank", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ok := make(chan struct{}, 1)
	go serve(ln, g, token, deadline, ok)

	var wg sync.WaitGroup
	start := time.Now()
	for i := range strangers {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			switch i % 3 {
			case 0: // says nothing
			case 1:
				c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			case 2:
				auth.Handshake(c, []byte("a wrong token, 32 bytes long...."), auth.Store, true, time.Now().Add(5*time.Second))
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			var b [256]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					return // cut off
				}
			}
		}()
	}
	// A real client, behind the flood.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Handshake(c, token, auth.Store, true, time.Now().Add(30*time.Second)); err != nil {
		t.Fatalf("the real client behind the flood: %v", err)
	}
	c.Close()
	<-ok
	wg.Wait()
	took := time.Since(start)
	ln.Close()
	g.Close()
	if p := g.Peak(); p > slots {
		t.Errorf("%d connections authenticating at once, want at most %d", p, slots)
	}
	// Each slot serves a silent stranger for a deadline at most.
	if limit := time.Duration(strangers/slots+2) * deadline * 3; took > limit {
		t.Errorf("the flood took %v to clear, want under %v", took, limit)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "rendezvous: refused a connection") ||
		!regexp.MustCompile(`msg="rendezvous: refused 299 connections from 1 address in [0-9.]+ s" rank=0`).MatchString(lines[1]) {
		t.Fatalf("log:\n%s\nwant a first refusal in full and one summary of 299 connections from 1 address", logs.String())
	}
}

// TestGateSpells: refusals are said in full after a quiet period, and
// summarised once per period while they keep coming.
func TestGateSpells(t *testing.T) {
	var logs lockedBuffer
	every := 100 * time.Millisecond
	g := New("tcp", 1, every, slog.New(slog.NewTextHandler(&logs, nil)))
	a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	b := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 2}
	g.Refuse(a, auth.ErrDenied)
	g.Refuse(a, auth.ErrDenied)
	g.Refuse(b, auth.ErrDenied)
	time.Sleep(every + every/2) // the summary
	time.Sleep(2 * every)       // a quiet period: the spell ends
	g.Refuse(b, auth.ErrProtocol)
	g.Close()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{"tcp: refused a connection", "tcp: refused 2 connections from 2 addresses in", "tcp: refused a connection"}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s\nwant %d lines", logs.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[2], "not a gocoll peer") {
		t.Errorf("the refusal after the quiet period is not in full: %s", lines[2])
	}
}
