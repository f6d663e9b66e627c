package auth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection: the one that
// dialed and the one that accepted. (net.Pipe will not do: it has no buffer,
// and both ends of the handshake write before they read.)
func pair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		d.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { d.Close(); r.c.Close() })
	return d, r.c
}

// side is one end's arguments to Handshake.
type side struct {
	token  string
	svc    Service
	dialer bool
}

// both runs Handshake on both ends at once and returns their errors.
func both(t *testing.T, a, b side) (errA, errB error, ca, cb net.Conn) {
	t.Helper()
	ca, cb = pair(t)
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errA = Handshake(ca, []byte(a.token), a.svc, a.dialer, deadline) }()
	go func() { defer wg.Done(); errB = Handshake(cb, []byte(b.token), b.svc, b.dialer, deadline) }()
	wg.Wait()
	return errA, errB, ca, cb
}

func TestHandshakePairs(t *testing.T) {
	tests := []struct {
		name string
		a, b side
		want error // for both ends; nil means success
	}{
		{"same token", side{"s3cret", Store, true}, side{"s3cret", Store, false}, nil},
		{"same token mesh", side{"s3cret", Mesh, true}, side{"s3cret", Mesh, false}, nil},
		{"both tokens empty", side{"", Store, true}, side{"", Store, false}, nil},
		{"long binary token", side{"\x00\xff" + string(make([]byte, 200)), Mesh, true}, side{"\x00\xff" + string(make([]byte, 200)), Mesh, false}, nil},
		{"different tokens", side{"s3cret", Store, true}, side{"other", Store, false}, ErrDenied},
		{"token prefix", side{"s3cret", Store, true}, side{"s3cre", Store, false}, ErrDenied},
		{"one token empty", side{"", Store, true}, side{"s3cret", Store, false}, ErrDenied},
		{"token case", side{"abcdef", Store, true}, side{"ABCDEF", Store, false}, ErrDenied},
		{"different services", side{"s3cret", Store, true}, side{"s3cret", Mesh, false}, ErrProtocol},
		{"unknown service", side{"s3cret", Service(7), true}, side{"s3cret", Store, false}, ErrProtocol},
		{"both dialers", side{"s3cret", Store, true}, side{"s3cret", Store, true}, ErrDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errA, errB, ca, cb := both(t, tt.a, tt.b)
			for i, err := range []error{errA, errB} {
				switch {
				case tt.want == nil && err != nil:
					t.Errorf("end %d: %v, want success", i, err)
				case tt.want != nil && !errors.Is(err, tt.want):
					t.Errorf("end %d: %v, want %v", i, err, tt.want)
				}
			}
			if tt.want != nil || t.Failed() {
				return
			}
			// The connection is usable afterwards, in both directions,
			// and nothing of the handshake is left unread.
			msg := []byte("after the handshake")
			go ca.Write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(cb, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("read %q, %v; want %q", got, err, msg)
			}
			go cb.Write(msg)
			if _, err := io.ReadFull(ca, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("read %q, %v; want %q", got, err, msg)
			}
		})
	}
}

func TestHandshakeClearsDeadline(t *testing.T) {
	ca, cb := pair(t)
	deadline := time.Now().Add(300 * time.Millisecond)
	errc := make(chan error, 1)
	go func() { errc <- Handshake(cb, []byte("tok"), Mesh, false, deadline) }()
	if err := Handshake(ca, []byte("tok"), Mesh, true, deadline); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Once past the handshake's deadline, the connection still works.
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	go ca.Write([]byte("x"))
	var b [1]byte
	if _, err := io.ReadFull(cb, b[:]); err != nil {
		t.Fatalf("read after the handshake deadline: %v", err)
	}
}

// helloFor builds a hello as a peer would send it.
func helloFor(magic4 string, version, svc uint16, nonce byte) []byte {
	h := make([]byte, helloLen)
	copy(h, magic4)
	binary.LittleEndian.PutUint16(h[4:], version)
	binary.LittleEndian.PutUint16(h[6:], svc)
	for i := 8; i < helloLen; i++ {
		h[i] = nonce
	}
	return h
}

// readHello consumes the hello the handshake sends, so that closing the
// connection afterwards is a clean end of stream rather than a reset.
func readHello(c net.Conn) {
	var b [helloLen]byte
	io.ReadFull(c, b[:])
}

// TestHandshakeBadPeer runs Handshake against a scripted peer on the other
// end of the connection.
func TestHandshakeBadPeer(t *testing.T) {
	const wait = 300 * time.Millisecond
	tests := []struct {
		name string
		// peer plays the other end; it gets the connection and returns
		// when it is done with it (the connection is then closed).
		peer     func(c net.Conn)
		want     error
		deadline bool // the error must come from the deadline
	}{
		{
			name: "garbage",
			peer: func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n")); io.Copy(io.Discard, c) },
			want: ErrProtocol,
		},
		{
			name: "wrong magic",
			peer: func(c net.Conn) { c.Write(helloFor("NCCL", Version, uint16(Store), 1)); io.Copy(io.Discard, c) },
			want: ErrProtocol,
		},
		{
			name: "wrong version",
			peer: func(c net.Conn) { c.Write(helloFor("GCOL", Version+1, uint16(Store), 1)); io.Copy(io.Discard, c) },
			want: ErrProtocol,
		},
		{
			name: "wrong service",
			peer: func(c net.Conn) { c.Write(helloFor("GCOL", Version, uint16(Mesh), 1)); io.Copy(io.Discard, c) },
			want: ErrProtocol,
		},
		{
			name: "short hello then hang up",
			peer: func(c net.Conn) { readHello(c); c.Write([]byte("GCOL")) },
			want: io.ErrUnexpectedEOF,
		},
		{
			name: "hangs up at once",
			peer: func(c net.Conn) { readHello(c) },
			want: io.EOF,
		},
		{
			name:     "never answers",
			peer:     func(c net.Conn) { io.Copy(io.Discard, c) },
			want:     os.ErrDeadlineExceeded,
			deadline: true,
		},
		{
			name:     "hello but no proof",
			peer:     func(c net.Conn) { c.Write(helloFor("GCOL", Version, uint16(Store), 1)); io.Copy(io.Discard, c) },
			want:     os.ErrDeadlineExceeded,
			deadline: true,
		},
		{
			name: "hello and a forged proof",
			peer: func(c net.Conn) {
				c.Write(helloFor("GCOL", Version, uint16(Store), 1))
				c.Write(bytes.Repeat([]byte{0xAB}, macLen))
				io.Copy(io.Discard, c)
			},
			want: ErrDenied,
		},
		{
			name: "proof made with another token",
			peer: func(c net.Conn) {
				var theirs [helloLen]byte
				y, own := share(t, []byte("another token, same length"), Store)
				c.Write(own)
				io.ReadFull(c, theirs[:])
				secret, err := sessionSecret(y, own, theirs[:], false)
				if err != nil {
					t.Error(err)
					return
				}
				io.ReadFull(c, make([]byte, macLen))
				c.Write(proof(secret, false))
				io.Copy(io.Discard, c)
			},
			want: ErrDenied,
		},
		{
			name: "low-order share",
			peer: func(c net.Conn) {
				h := helloFor("GCOL", Version, uint16(Store), 0) // u = 0
				c.Write(h)
				io.Copy(io.Discard, c)
			},
			want: ErrDenied,
		},
		{
			// Reflection: send the handshake's own hello and proof back.
			name: "echo",
			peer: func(c net.Conn) { io.Copy(c, c) },
			want: ErrDenied,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ours, theirs := pair(t)
			done := make(chan struct{})
			go func() { defer close(done); tt.peer(theirs); theirs.Close() }()
			start := time.Now()
			err := Handshake(ours, []byte("s3cret"), Store, true, start.Add(wait))
			took := time.Since(start)
			ours.Close() // lets the peer's io.Copy end
			<-done
			if !errors.Is(err, tt.want) {
				t.Fatalf("Handshake: %v, want %v", err, tt.want)
			}
			if tt.deadline && took < wait {
				t.Errorf("failed after %v, before the %v deadline", took, wait)
			}
			if took > wait+2*time.Second {
				t.Errorf("took %v with a %v deadline", took, wait)
			}
		})
	}
}

// recorder keeps a copy of everything written to a connection.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recorder) sent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.out.Bytes())
}

// TestHandshakeReplay records what each end of a good handshake sent and
// plays it back to a fresh handshake, which must refuse it: every hello
// carries a fresh share, so an old proof confirms the wrong secret.
func TestHandshakeReplay(t *testing.T) {
	token := []byte("s3cret-token-value")
	ca, cb := pair(t)
	ra, rb := &recorder{Conn: ca}, &recorder{Conn: cb}
	deadline := time.Now().Add(5 * time.Second)
	errc := make(chan error, 1)
	go func() { errc <- Handshake(rb, token, Store, false, deadline) }()
	if err := Handshake(ra, token, Store, true, deadline); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	fromDialer, fromListener := ra.sent(), rb.sent()
	if len(fromDialer) != helloLen+macLen || len(fromListener) != helloLen+macLen {
		t.Fatalf("sent %d and %d bytes, want %d each", len(fromDialer), len(fromListener), helloLen+macLen)
	}
	for _, tr := range [][]byte{fromDialer, fromListener} {
		if len(tr) != helloLen+macLen {
			t.Fatalf("transcript of %d bytes, want %d", len(tr), helloLen+macLen)
		}
		if bytes.Contains(tr, token) {
			t.Fatal("the token crossed the wire")
		}
	}
	if bytes.Equal(fromDialer[8:helloLen], fromListener[8:helloLen]) {
		t.Fatal("both ends sent the same share")
	}

	tests := []struct {
		name       string
		transcript []byte
		dialer     bool // role of the end being fooled
	}{
		{"dialer's transcript to a listener", fromDialer, false},
		{"listener's transcript to a dialer", fromListener, true},
		{"listener's transcript to a listener", fromListener, false},
		{"dialer's transcript to a dialer", fromDialer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ours, theirs := pair(t)
			go func() {
				theirs.Write(tt.transcript)
				io.Copy(io.Discard, theirs)
			}()
			err := Handshake(ours, token, Store, tt.dialer, time.Now().Add(5*time.Second))
			if !errors.Is(err, ErrDenied) {
				t.Fatalf("replayed handshake: %v, want %v", err, ErrDenied)
			}
		})
	}
}

// TestHandshakeFreshShares checks that no two hellos repeat a share.
func TestHandshakeFreshShares(t *testing.T) {
	seen := make(map[string]bool)
	for i := 0; i < 8; i++ {
		ca, cb := pair(t)
		ra := &recorder{Conn: ca}
		deadline := time.Now().Add(5 * time.Second)
		errc := make(chan error, 1)
		go func() { errc <- Handshake(cb, []byte("t"), Mesh, false, deadline) }()
		if err := Handshake(ra, []byte("t"), Mesh, true, deadline); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		hello := ra.sent()[:helloLen]
		if !bytes.Equal(hello[:4], magic[:]) || binary.LittleEndian.Uint16(hello[4:]) != Version ||
			Service(binary.LittleEndian.Uint16(hello[6:])) != Mesh {
			t.Fatalf("hello header % x", hello[:8])
		}
		nonce := string(hello[8:])
		if seen[nonce] {
			t.Fatalf("share % x sent twice", nonce)
		}
		seen[nonce] = true
	}
}

func TestServiceString(t *testing.T) {
	tests := []struct {
		s    Service
		want string
	}{
		{Store, "store"},
		{Mesh, "mesh"},
		{QueuePair, "queue pair"},
		{Service(9), "service(9)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Service(%d).String() = %q, want %q", uint16(tt.s), got, tt.want)
		}
	}
}
