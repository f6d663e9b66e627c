package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

func TestConformanceEncrypted(t *testing.T) {
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport {
		return mesh(t, n, tcp.Options{Encrypt: true})
	})
}

// TestConformanceEncryptedSmallSlots runs the suite over sealed links
// with two small slots, so that every size spans many frames and credit
// frames, sealed too, go back all the time.
func TestConformanceEncryptedSmallSlots(t *testing.T) {
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport {
		return mesh(t, n, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}, Encrypt: true})
	})
}

func TestSendPartsEncrypted(t *testing.T) {
	conformance.PartSender(t, mesh(t, 2, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 8 << 10}, Encrypt: true}), 8<<10)
}

// redirect is a rendezvous store that hands out, for the addresses it is
// told to, a proxy's address instead of the rank's own.
type redirect struct {
	transport.Store
	mu sync.Mutex
	to map[string]string
}

func (s *redirect) Get(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	addr, ok := s.to[key]
	s.mu.Unlock()
	if ok {
		return []byte(addr), nil
	}
	return s.Store.Get(ctx, key)
}

// Bytes each end of a mesh connection sends before its first frame: the
// auth hello and proof (auth.SentLen), the mesh hello (48) and, from the
// listening end, the verdict (1).
const (
	dialerPreamble   = auth.SentLen + 48
	listenerPreamble = dialerPreamble + 1
	meshHelloAt      = auth.SentLen
)

// proxy forwards connections from its listener to target. Past the
// preamble it cuts each direction into sealed frames (header, payload,
// tag) and writes what edit returns for each: edit gets the direction
// (0 from the dialer, 1 from the listener) and the frame's index in it.
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	edit   func(dir, i int, frame []byte) [][]byte
	wire   bytes.Buffer // every frame byte forwarded, both directions
	mu     sync.Mutex
}

func startProxy(t *testing.T, target string, edit func(dir, i int, frame []byte) [][]byte) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, edit: edit}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.t.Cleanup(func() { c.Close(); s.Close() })
		go p.pump(s, c, 0, dialerPreamble)
		go p.pump(c, s, 1, listenerPreamble)
	}
}

func (p *proxy) pump(dst, src net.Conn, dir, preamble int) {
	defer dst.Close()
	// The preamble passes as it comes: each end waits for the other's
	// hello before it proves the token.
	var pre bytes.Buffer
	if _, err := io.CopyN(dst, io.TeeReader(src, &pre), int64(preamble)); err != nil {
		return
	}
	if b := pre.Bytes(); string(b[meshHelloAt:meshHelloAt+3]) != "MSH" {
		p.t.Errorf("proxy: direction %d: no mesh hello where expected: %q", dir, b[meshHelloAt:meshHelloAt+4])
		return
	}
	for i := 0; ; i++ {
		hdr := make([]byte, 12)
		if _, err := io.ReadFull(src, hdr); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(hdr[4:])
		if n > 1<<20 {
			p.t.Errorf("proxy: direction %d frame %d: length %d", dir, i, n)
			return
		}
		frame := append(hdr, make([]byte, n+16)...)
		if _, err := io.ReadFull(src, frame[12:]); err != nil {
			return
		}
		p.mu.Lock()
		p.wire.Write(frame)
		p.mu.Unlock()
		out := [][]byte{frame}
		if p.edit != nil {
			out = p.edit(dir, i, frame)
		}
		for _, f := range out {
			if _, err := dst.Write(f); err != nil {
				return
			}
		}
	}
}

func (p *proxy) seen() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.wire.Bytes())
}

// pairViaProxy connects ranks 0 and 1 of a job of two with opts, links
// them with rank 1 dialing rank 0 through a proxy that applies edit, and
// returns the transports and the proxy. Frames from rank 0 to rank 1 go
// the proxy's direction 1.
func pairViaProxy(t *testing.T, opts tcp.Options, edit func(dir, i int, frame []byte) [][]byte) ([]*tcp.Transport, *proxy) {
	t.Helper()
	token := []byte("encrypt-test-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := make([]*redirect, 2)
	ts := make([]*tcp.Transport, 2)
	for r := range ts {
		c, err := bootstrap.Dial(ctx, srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		stores[r] = &redirect{Store: c, to: map[string]string{}}
		ts[r], err = tcp.Connect(ctx, stores[r], r, 2, token, opts)
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
		t.Cleanup(func() { ts[r].Close() })
	}
	addr0, err := stores[0].Get(ctx, "tcp/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, string(addr0), edit)
	stores[1].mu.Lock()
	stores[1].to["tcp/addr/0"] = px.ln.Addr().String()
	stores[1].mu.Unlock()
	// Rank 1 dials the lower rank at once, so the link is the proxy's
	// before rank 0 sends a thing.
	if err := ts[1].Send(ctx, 0, nil); err != nil {
		t.Fatalf("rank 1 linking to rank 0 through the proxy: %v", err)
	}
	m, err := ts[0].Recv(ctx, 1)
	if err != nil {
		t.Fatalf("rank 0: first message from rank 1: %v", err)
	}
	ts[0].Release(m)
	return ts, px
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*31 + i>>8)
	}
	return b
}

// TestEncryptRoundTrip sends every size from empty to a whole slot
// between every pair of 2 and 3 ranks over sealed links, headed or not,
// and checks what arrives.
func TestEncryptRoundTrip(t *testing.T) {
	const slot = 64 << 10
	sizes := []int{0, 1, 12, 100, 4 << 10, 4<<10 + 1, 16<<10 - 1, 16 << 10, 40000, slot - 16, slot}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			ts := mesh(t, n, tcp.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: slot}, Encrypt: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, 2*n*n)
			for from := range ts {
				for to := range ts {
					if from == to {
						continue
					}
					wg.Add(2)
					go func() {
						defer wg.Done()
						ps := ts[from].(transport.PartSender)
						for i, size := range sizes {
							msg := pattern(size, from*100+to*10+i)
							var err error
							if i%2 == 1 && size >= 5 {
								_, err = ps.SendParts(ctx, to, msg[:5], msg[5:], true)
							} else {
								err = ts[from].Send(ctx, to, msg)
							}
							if err != nil {
								errs <- fmt.Errorf("send %d bytes %d->%d: %w", size, from, to, err)
								return
							}
						}
					}()
					go func() {
						defer wg.Done()
						for i, size := range sizes {
							m, err := ts[to].Recv(ctx, from)
							if err != nil {
								errs <- fmt.Errorf("recv %d bytes %d->%d: %w", size, from, to, err)
								return
							}
							if !bytes.Equal(m.Data, pattern(size, from*100+to*10+i)) {
								errs <- fmt.Errorf("%d->%d: message %d (%d bytes) arrived as %d different bytes", from, to, i, size, len(m.Data))
							}
							ts[to].Release(m)
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestEncryptHidesPayload checks through a proxy that what crosses the
// wire of a sealed link does not contain the payload, which a plain link
// carries as is.
func TestEncryptHidesPayload(t *testing.T) {
	secret := bytes.Repeat([]byte("attack at dawn! "), 64)
	ts, px := pairViaProxy(t, tcp.Options{Encrypt: true, CloseLinger: 200 * time.Millisecond}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts[0].Send(ctx, 1, secret); err != nil {
		t.Fatal(err)
	}
	m, err := ts[1].Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, secret) {
		t.Fatalf("received %d bytes, not what was sent", len(m.Data))
	}
	ts[1].Release(m)
	if wire := px.seen(); bytes.Contains(wire, []byte("attack at dawn")) || len(wire) < len(secret) {
		t.Fatalf("the wire (%d bytes) shows the payload, or not all of it passed", len(wire))
	}
}

// TestEncryptTamper alters, replays, reorders and drops sealed frames in
// flight: the receiver loses the sender, naming it, with ErrFrameAuth,
// after delivering only what arrived intact and in order.
func TestEncryptTamper(t *testing.T) {
	flip := func(at func(f []byte) int) func(dir, i int, f []byte) [][]byte {
		return func(dir, i int, f []byte) [][]byte {
			if dir == 1 && i == 0 {
				f = bytes.Clone(f)
				f[at(f)] ^= 0x20
			}
			return [][]byte{f}
		}
	}
	var held []byte
	cases := []struct {
		name string
		edit func(dir, i int, f []byte) [][]byte
		good int // messages delivered before the loss
	}{
		{"payload byte", flip(func(f []byte) int { return 12 + 100 }), 0},
		{"tag byte", flip(func(f []byte) int { return len(f) - 1 }), 0},
		{"header credits", flip(func(f []byte) int { return 8 }), 0},
		{"header spare byte", flip(func(f []byte) int { return 1 }), 0},
		{"replayed", func(dir, i int, f []byte) [][]byte {
			if dir == 1 && i == 0 {
				return [][]byte{f, f}
			}
			return [][]byte{f}
		}, 1},
		{"reordered", func(dir, i int, f []byte) [][]byte {
			switch {
			case dir == 1 && i == 0:
				held = f
				return nil
			case dir == 1 && i == 1:
				return [][]byte{f, held}
			}
			return [][]byte{f}
		}, 0},
		{"dropped", func(dir, i int, f []byte) [][]byte {
			if dir == 1 && i == 0 {
				return nil
			}
			return [][]byte{f}
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := pairViaProxy(t, tcp.Options{Encrypt: true, CloseLinger: 200 * time.Millisecond}, tc.edit)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const count = 3
			for i := 0; i < count; i++ {
				if err := ts[0].Send(ctx, 1, pattern(1000, i)); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			var err error
			got := 0
			for ; got < count; got++ {
				var m transport.Message
				m, err = ts[1].Recv(ctx, 0)
				if err != nil {
					break
				}
				if !bytes.Equal(m.Data, pattern(1000, got)) {
					t.Fatalf("message %d delivered altered", got)
				}
				ts[1].Release(m)
			}
			if got != tc.good {
				t.Errorf("%d messages delivered before the loss, want %d", got, tc.good)
			}
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrPeerLost) || !errors.Is(err, tcp.ErrFrameAuth) || !errors.As(err, &pe) || pe.Peer != 0 {
				t.Fatalf("recv error %v, want rank 0 lost with ErrFrameAuth", err)
			}
			if !strings.Contains(err.Error(), "rank 0") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line naming rank 0", err)
			}
			lost := ts[1].LostErr()
			if !errors.Is(lost, tcp.ErrFrameAuth) {
				t.Fatalf("LostErr %v, want the authentication failure", lost)
			}
		})
	}
}

// TestEncryptMismatch links a rank that encrypts with one that does not:
// each end's call fails with one line naming the setting, and no frame
// passes.
func TestEncryptMismatch(t *testing.T) {
	ts, _ := job(t, 2, all(2), func(r int) tcp.Options {
		return tcp.Options{Encrypt: r == 0, CloseLinger: 200 * time.Millisecond}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = ts[r].Send(ctx, 1-r, []byte("hello"))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, tcp.ErrEncryptMismatch) || !errors.Is(err, transport.ErrPeerLost) {
			t.Errorf("rank %d: send error %v, want ErrEncryptMismatch", r, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "GOCOLL_ENCRYPT") || strings.Contains(msg, "\n") {
			t.Errorf("rank %d: error %q: want one line naming GOCOLL_ENCRYPT", r, msg)
		}
	}
}

// TestEncryptNeedsToken: encryption without a token to key it fails
// Connect, naming GRUN_TOKEN, even for a job of one.
func TestEncryptNeedsToken(t *testing.T) {
	for _, size := range []int{1, 2} {
		_, err := tcp.Connect(context.Background(), nil, 0, size, nil, tcp.Options{Encrypt: true})
		if !errors.Is(err, tcp.ErrNoToken) || !strings.Contains(err.Error(), "GRUN_TOKEN") {
			t.Errorf("size %d: Connect without a token: %v, want ErrNoToken naming GRUN_TOKEN", size, err)
		}
	}
}
