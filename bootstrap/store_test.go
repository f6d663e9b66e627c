package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
)

var testToken = []byte("0123456789abcdef0123456789abcdef")

// newServer starts a store on a loopback port, closed when the test ends.
func newServer(t *testing.T, token []byte) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, s *Server) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), s.Addr(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is an authenticated connection to s that the test drives frame by
// frame.
func rawConn(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := auth.Handshake(c, testToken, auth.Store, true, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	return c
}

// request encodes a request frame as the client does.
func request(op byte, key string, val []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(3+len(key)+len(val)))
	b = append(b, op)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	return append(append(b, key...), val...)
}

// eventually polls cond, which must become true within a few seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkServes fails unless s still answers a fresh client.
func checkServes(t *testing.T, s *Server) {
	t.Helper()
	c := dial(t, s)
	ctx := testCtx(t)
	key := fmt.Sprintf("alive/%p", c)
	if err := c.Put(ctx, key, []byte("yes")); err != nil {
		t.Fatalf("store stopped serving: put: %v", err)
	}
	if v, err := c.Get(ctx, key); err != nil || string(v) != "yes" {
		t.Fatalf("store stopped serving: get: %q, %v", v, err)
	}
}

func TestStorePutGet(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	ctx := testCtx(t)
	tests := []struct {
		name string
		puts []string // values put under key, in order; Get sees the last
		key  string
		want []byte
	}{
		{"simple", []string{"10.0.0.1:4242"}, "rank/0/addr", []byte("10.0.0.1:4242")},
		{"empty value", []string{""}, "rank/0/empty", []byte{}},
		{"binary value", []string{"\x00\x01\xff\x00"}, "qpn/1", []byte{0, 1, 0xff, 0}},
		{"empty key", []string{"v"}, "", []byte("v")},
		{"overwrite", []string{"first", "second", "third"}, "rank/0/again", []byte("third")},
		{"largest entry", []string{strings.Repeat("v", MaxValue)}, strings.Repeat("k", MaxKey), bytes.Repeat([]byte("v"), MaxValue)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range tt.puts {
				if err := c.Put(ctx, tt.key, []byte(v)); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			got, err := c.Get(ctx, tt.key)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("Get returned %d bytes %.20q, want %d bytes %.20q", len(got), got, len(tt.want), tt.want)
			}
			// A second client sees the same value.
			got, err = dial(t, s).Get(ctx, tt.key)
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("second client got %d bytes, %v", len(got), err)
			}
		})
	}
	if c.LocalAddr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
		t.Errorf("LocalAddr %v, want 127.0.0.1", c.LocalAddr())
	}
	if n := s.Refused(); n != 0 {
		t.Errorf("Refused() = %d, want 0", n)
	}
}

// TestStoreScan: a scan answers at once with the entries under a prefix,
// none when there are none, and the latest value of each.
func TestStoreScan(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	ctx := testCtx(t)
	if m, err := c.Scan(ctx, "calls/"); err != nil || len(m) != 0 {
		t.Fatalf("Scan of an empty store = %v, %v; want nothing and no error", m, err)
	}
	for k, v := range map[string]string{"calls/0/0": "a", "calls/0/1": "", "calls/1/0": "c", "other": "d"} {
		if err := c.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(ctx, "calls/0/0", []byte("a2")); err != nil {
		t.Fatal(err)
	}
	m, err := dial(t, s).Scan(ctx, "calls/0/")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || string(m["calls/0/0"]) != "a2" || m["calls/0/1"] == nil || len(m["calls/0/1"]) != 0 {
		t.Fatalf("Scan(calls/0/) = %q, want calls/0/0=a2 and an empty calls/0/1", m)
	}
}

// TestStoreCreate: of many clients racing to create one key, exactly one
// wins, and every client is answered with the winner's value; a key
// already put is never replaced.
func TestStoreCreate(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	const n = 16
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := dial(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v []byte
			v, errs[i] = c.Create(ctx, "decided", []byte(fmt.Sprintf("proposal %d", i)))
			got[i] = string(v)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("client %d: Create: %v", i, errs[i])
		}
		if got[i] != got[0] {
			t.Fatalf("client %d was answered %q, client 0 %q: want one winner for all", i, got[i], got[0])
		}
	}
	if !strings.HasPrefix(got[0], "proposal ") {
		t.Fatalf("the winner is %q, not one of the proposals", got[0])
	}
	if v, err := dial(t, s).Get(ctx, "decided"); err != nil || string(v) != got[0] {
		t.Fatalf("Get after the race = %q, %v; want the winner %q", v, err, got[0])
	}
	c := dial(t, s)
	if err := c.Put(ctx, "put first", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Create(ctx, "put first", []byte("new")); err != nil || string(v) != "old" {
		t.Fatalf("Create over a put key = %q, %v; want the old value kept", v, err)
	}
}

// TestStoreClientWaitedPastDeadline: a request whose context ends while
// another request holds the shared client fails with the context's error
// and leaves the client usable: nothing of it was sent.
func TestStoreClientWaitedPastDeadline(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	ctx := testCtx(t)
	held := make(chan error, 1)
	go func() {
		_, err := c.Departures(ctx, 300*time.Millisecond) // holds the client while it waits
		held <- err
	}()
	time.Sleep(50 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := c.Put(short, "k", []byte("v")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put whose context ended while waiting for the client = %v, want DeadlineExceeded", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the request that held the client: %v", err)
	}
	if err := c.Put(ctx, "k", []byte("v2")); err != nil {
		t.Fatalf("the client after a request gave up waiting for it: %v", err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v2" {
		t.Fatalf("Get = %q, %v; want v2", v, err)
	}
}

func TestStoreGetWaitsForPut(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	const waiters = 4
	type result struct {
		v   []byte
		err error
	}
	results := make(chan result, waiters)
	for i := 0; i < waiters; i++ {
		c := dial(t, s)
		go func() {
			v, err := c.Get(ctx, "late")
			results <- result{v, err}
		}()
	}
	// Nothing has been put, so nobody may have an answer. (If the Gets
	// have not reached the server yet this proves less, but never fails
	// wrongly.)
	select {
	case r := <-results:
		t.Fatalf("Get returned %q, %v before the key was put", r.v, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	// Other keys do not wake the waiters with the wrong value.
	p := dial(t, s)
	if err := p.Put(ctx, "other", []byte("nope")); err != nil {
		t.Fatal(err)
	}
	if err := p.Put(ctx, "late", []byte("at last")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		r := <-results
		if r.err != nil || string(r.v) != "at last" {
			t.Fatalf("waiter got %q, %v; want %q", r.v, r.err, "at last")
		}
	}
}

// TestStoreManyClients is what a job does: every rank publishes its address,
// then reads everyone else's.
func TestStoreManyClients(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	const n = 32
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, s.Addr(), testToken)
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			// Read the lower ranks, publish, then read the higher ones:
			// rank r's Gets wait for ranks that publish after it asks.
			for p := 0; p < n; p++ {
				if p == r {
					if err := c.Put(ctx, fmt.Sprintf("rank/%d", r), []byte(fmt.Sprintf("addr-of-%d", r))); err != nil {
						errc <- err
						return
					}
					continue
				}
				v, err := c.Get(ctx, fmt.Sprintf("rank/%d", p))
				if err != nil {
					errc <- err
					return
				}
				if want := fmt.Sprintf("addr-of-%d", p); string(v) != want {
					errc <- fmt.Errorf("rank %d read %q for rank %d, want %q", r, v, p, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := s.Refused(); n != 0 {
		t.Errorf("Refused() = %d, want 0", n)
	}
}

// TestStoreClientConcurrentUse shares one Client between goroutines.
func TestStoreClientConcurrentUse(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				k := fmt.Sprintf("g%d/%d", g, i)
				if err := c.Put(ctx, k, []byte(k)); err != nil {
					t.Error(err)
					return
				}
				if v, err := c.Get(ctx, k); err != nil || string(v) != k {
					t.Errorf("Get(%q) = %q, %v", k, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestStoreGetContext(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
		// usable: nothing was sent, so the client still works.
		usable bool
	}{
		{"cancelled before", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled, true},
		{"expires while waiting", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded, false},
		{"cancelled while waiting", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, false},
	}
	s := newServer(t, testToken)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, s)
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			v, err := c.Get(ctx, "never-put")
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Get took %v to notice its context", took)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Get = %q, %v; want %v", v, err, tt.want)
			}
			if tt.usable {
				if err := c.Put(context.Background(), "k", []byte("v")); err != nil {
					t.Fatalf("Put after a Get given up before it was sent: %v", err)
				}
				return
			}
			// The request may have been cut off half-way, so the client
			// is done for; it says so rather than reading a stale answer.
			if _, err := c.Get(context.Background(), "k"); err == nil {
				t.Fatal("Get on a client whose request was cut off succeeded")
			}
		})
	}
	checkServes(t, s)
}

// TestStoreCancelAfterReply cancels each request's context just as the
// request completes. A request that succeeded must leave the client usable.
func TestStoreCancelAfterReply(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	for i := 0; i < 300; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		if err := c.Put(ctx, "k", []byte("v")); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put with a cancelled context: %v", err)
			}
			c = dial(t, s) // cut off half-way: this client is spent
			continue
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := c.Get(ctx2, "k")
		cancel2()
		if err != nil || string(v) != "v" {
			t.Fatalf("round %d: Get after a successful Put = %q, %v", i, v, err)
		}
	}
}

func TestStoreWrongToken(t *testing.T) {
	tests := []struct {
		name          string
		server, token []byte
	}{
		{"wrong token", testToken, []byte("fedcba9876543210fedcba9876543210")},
		{"no token", testToken, nil},
		{"prefix", testToken, testToken[:len(testToken)-1]},
		{"trailing newline", testToken, append(bytes.Clone(testToken), '\n')},
		{"decoded hex", []byte("00ff"), []byte{0x00, 0xff}},
		{"unauthenticated store", nil, testToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.server)
			for i := 1; i <= 2; i++ {
				c, err := Dial(testCtx(t), s.Addr(), tt.token)
				if !errors.Is(err, auth.ErrDenied) {
					if c != nil {
						c.Close()
					}
					t.Fatalf("Dial with the wrong token: %v, want %v", err, auth.ErrDenied)
				}
				eventually(t, fmt.Sprintf("Refused() == %d", i), func() bool { return s.Refused() == i })
			}
			// The right token still gets in.
			c, err := Dial(testCtx(t), s.Addr(), tt.server)
			if err != nil {
				t.Fatalf("Dial with the right token: %v", err)
			}
			c.Close()
		})
	}
}

// TestStoreStrangers connects things that are not store clients. Each must
// be refused and cut off, and must not hold up real clients meanwhile.
func TestStoreStrangers(t *testing.T) {
	tests := []struct {
		name  string
		speak func(c net.Conn)
	}{
		{"http request", func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: store\r\nAccept: */*\r\n\r\n")) }},
		{"zeros", func(c net.Conn) { c.Write(make([]byte, 4096)) }},
		{"a few bytes", func(c net.Conn) { c.Write([]byte("hi")) }},
		{"says nothing", func(c net.Conn) {}},
		{"mesh handshake", func(c net.Conn) {
			auth.Handshake(c, testToken, auth.Mesh, true, time.Now().Add(5*time.Second))
		}},
	}
	// Cut silent strangers off quickly.
	saved := handshakeTimeout
	handshakeTimeout = 500 * time.Millisecond
	s := newServer(t, testToken)
	handshakeTimeout = saved

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tt.speak(c)
			// While the stranger is connected, a real rank gets served.
			checkServes(t, s)
			// The store cuts the stranger off: whatever it says, it
			// reads the store's hello at most, then the end of stream.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("stranger was not cut off: read %d bytes, %v", n, err)
			}
			if n > 40 { // auth's hello
				t.Fatalf("stranger was sent %d bytes, want at most a hello", n)
			}
			eventually(t, fmt.Sprintf("Refused() == %d", i+1), func() bool { return s.Refused() == i+1 })
		})
	}
}

// TestStoreBadFrames sends malformed requests on an authenticated
// connection. The store drops that client, counts it as refused, and goes
// on serving the others.
func TestStoreBadFrames(t *testing.T) {
	frame := func(n uint32, body []byte) []byte { return append(binary.LittleEndian.AppendUint32(nil, n), body...) }
	tests := []struct {
		name      string
		send      []byte
		closeSend bool   // half-close after sending
		reply     string // an error reply expected before the store hangs up
	}{
		{"empty frame", frame(0, nil), false, ""},
		{"frame shorter than a header", frame(2, []byte{opGet, 0}), false, ""},
		{"frame over the limit", frame(maxFrame+1, nil), false, ""},
		{"frame length 4 GiB", frame(0xffffffff, nil), false, ""},
		{"key longer than frame", frame(5, []byte{opGet, 10, 0, 'a', 'b'}), false, ""},
		{"key over the limit", frame(3+MaxKey+1, append([]byte{opPut, byte((MaxKey + 1) & 0xff), byte((MaxKey + 1) >> 8)}, make([]byte, MaxKey+1)...)), false, ""},
		{"get with a value", request(opGet, "k", []byte("v")), false, ""},
		{"truncated frame", frame(100, []byte{opPut, 1, 0, 'k', 'v'}), true, ""},
		{"truncated length", []byte{10, 0}, true, ""},
		{"unknown op", request(9, "k", nil), false, "unknown op 9"},
		{"op zero", request(0, "k", nil), false, "unknown op 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, testToken)
			c := rawConn(t, s)
			// A good request first: the connection works until the bad one.
			if _, err := c.Write(request(opPut, "k", []byte("v"))); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(c)
			if resp := readResponse(t, r); resp == nil || resp[0] != statusOK {
				t.Fatalf("good request answered % x", resp)
			}
			if _, err := c.Write(tt.send); err != nil {
				t.Fatal(err)
			}
			if tt.closeSend {
				c.(*net.TCPConn).CloseWrite()
			}
			if tt.reply != "" {
				resp := readResponse(t, r)
				if resp == nil || resp[0] != statusErr || !strings.Contains(string(resp[1:]), tt.reply) {
					t.Fatalf("reply %q, want an error saying %q", resp, tt.reply)
				}
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := io.Copy(io.Discard, r); n != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("after a bad frame: read %d more bytes, %v; want the store to hang up", n, err)
			}
			checkServes(t, s)
			s.Close() // waits for the connection handlers, so Refused is final
			if n := s.Refused(); n != 1 {
				t.Fatalf("Refused() = %d, want 1", n)
			}
		})
	}
}

// TestStoreCleanHangUp: a client that disconnects between requests is not
// counted as refused.
func TestStoreCleanHangUp(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	if err := c.Put(testCtx(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	checkServes(t, s)
	s.Close()
	if n := s.Refused(); n != 0 {
		t.Fatalf("Refused() = %d, want 0", n)
	}
}

// readResponse reads one response frame; nil if the store hung up.
func readResponse(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil
	}
	body := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("truncated response: %v", err)
	}
	return body
}

// TestClientRejectsOversize checks the limits on the client side: nothing
// is sent, and the client stays usable.
func TestClientRejectsOversize(t *testing.T) {
	s := newServer(t, testToken)
	c := dial(t, s)
	ctx := testCtx(t)
	tests := []struct {
		name string
		do   func() error
	}{
		{"put key", func() error { return c.Put(ctx, strings.Repeat("k", MaxKey+1), nil) }},
		{"put value", func() error { return c.Put(ctx, "k", make([]byte, MaxValue+1)) }},
		{"get key", func() error { _, err := c.Get(ctx, strings.Repeat("k", MaxKey+1)); return err }},
		{"get key of 64 KiB", func() error { _, err := c.Get(ctx, strings.Repeat("k", 1<<16)); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("got %v, want %v", err, ErrBadFrame)
			}
			if err := c.Put(ctx, "ok", []byte("fine")); err != nil {
				t.Fatalf("client unusable after a refused request: %v", err)
			}
		})
	}
	if n := s.Refused(); n != 0 {
		t.Errorf("Refused() = %d, want 0: oversize requests reached the store", n)
	}
}

// TestClientBadResponses puts a fake store behind the handshake and checks
// that the client refuses malformed answers.
func TestClientBadResponses(t *testing.T) {
	frame := func(n uint32, body []byte) []byte { return append(binary.LittleEndian.AppendUint32(nil, n), body...) }
	tests := []struct {
		name  string
		reply []byte
		want  error  // nil: any error whose text contains text
		text  string // in the error's text
	}{
		{"empty frame", frame(0, nil), ErrBadFrame, "response length 0"},
		{"over the limit", frame(2+MaxValue, nil), ErrBadFrame, "response length"},
		{"truncated", frame(10, []byte{statusOK, 'a'}), ErrBadFrame, "truncated"},
		{"error status", frame(5, []byte{statusErr, 'n', 'o', 'p', 'e'}), nil, "store refused: nope"},
		{"hang up", nil, ErrStoreClosed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				if auth.Handshake(c, testToken, auth.Store, false, time.Now().Add(5*time.Second)) != nil {
					return
				}
				r := bufio.NewReader(c)
				if _, _, _, err := readRequest(r); err != nil {
					return
				}
				c.Write(tt.reply)
			}()
			c, err := Dial(testCtx(t), ln.Addr().String(), testToken)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			v, err := c.Get(testCtx(t), "k")
			<-done
			if err == nil {
				t.Fatalf("Get = %q, want an error", v)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Get: %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Get: %v, want it to say %q", err, tt.text)
			}
		})
	}
}

func TestStoreClose(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	const waiters = 3
	errc := make(chan error, waiters)
	clients := make([]*Client, waiters)
	for i := range clients {
		clients[i] = dial(t, s)
		go func() {
			_, err := clients[i].Get(ctx, "never-put")
			errc <- err
		}()
	}
	select {
	case err := <-errc:
		t.Fatalf("Get returned %v before the store closed", err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i := 0; i < waiters; i++ {
		if err := <-errc; !errors.Is(err, ErrStoreClosed) {
			t.Errorf("waiting Get: %v, want %v", err, ErrStoreClosed)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v to release the waiters", took)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestStoreUseAfterClose: a client that was idle when the store closed
// finds out on its next request, whichever way the socket reports it.
func TestStoreUseAfterClose(t *testing.T) {
	for i := 0; i < 20; i++ {
		s := newServer(t, testToken)
		c := dial(t, s)
		if err := c.Put(testCtx(t), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := c.Get(testCtx(t), "k"); !errors.Is(err, ErrStoreClosed) {
			t.Fatalf("round %d: Get after the store closed: %v, want %v", i, err, ErrStoreClosed)
		}
	}
}

func TestDialFailsWithinContext(t *testing.T) {
	s := newServer(t, testToken)
	addr := s.Addr()
	s.Close()
	tests := []struct {
		name    string
		timeout time.Duration
		cancel  bool // cancelled before Dial
		want    error
	}{
		{"closed store, deadline", 200 * time.Millisecond, false, context.DeadlineExceeded},
		{"closed store, cancelled", time.Minute, true, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			if tt.cancel {
				cancel()
			}
			start := time.Now()
			c, err := Dial(ctx, addr, testToken)
			if c != nil {
				c.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Dial: %v, want %v", err, tt.want)
			}
			if took := time.Since(start); took > tt.timeout+2*time.Second && !tt.cancel || tt.cancel && took > 2*time.Second {
				t.Fatalf("Dial took %v", took)
			}
		})
	}
}

// TestDialWaitsForStore: the store may come up after the ranks start
// dialing (rank 0 serves it); Dial keeps trying.
func TestDialWaitsForStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := Dial(testCtx(t), addr, testToken)
		if err == nil {
			err = c.Put(testCtx(t), "early", []byte("bird"))
			c.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("Dial to a store not yet up returned %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	s, err := Listen(addr, testToken)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	defer s.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if v, err := dial(t, s).Get(testCtx(t), "early"); err != nil || string(v) != "bird" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

func TestParseRequest(t *testing.T) {
	body := func(op byte, klen uint16, rest string) []byte {
		b := []byte{op, 0, 0}
		binary.LittleEndian.PutUint16(b[1:], klen)
		return append(b, rest...)
	}
	tests := []struct {
		name    string
		in      []byte
		op      byte
		key     string
		val     string
		wantErr bool
	}{
		{"put", body(opPut, 3, "keyvalue"), opPut, "key", "value", false},
		{"put empty value", body(opPut, 3, "key"), opPut, "key", "", false},
		{"put empty key", body(opPut, 0, "value"), opPut, "", "value", false},
		{"get", body(opGet, 3, "key"), opGet, "key", "", false},
		{"get empty key", body(opGet, 0, ""), opGet, "", "", false},
		{"unknown op parses", body(7, 1, "k"), 7, "k", "", false},
		{"nil", nil, 0, "", "", true},
		{"one byte", []byte{opGet}, 0, "", "", true},
		{"two bytes", []byte{opGet, 0}, 0, "", "", true},
		{"key past the end", body(opGet, 4, "key"), 0, "", "", true},
		{"key length 65535", body(opPut, 0xffff, "k"), 0, "", "", true},
		{"key over the limit", body(opPut, MaxKey+1, strings.Repeat("k", MaxKey+1)), 0, "", "", true},
		{"value over the limit", body(opPut, 1, "k"+strings.Repeat("v", MaxValue+1)), 0, "", "", true},
		{"get with a value", body(opGet, 1, "kv"), 0, "", "", true},
		{"join", body(opJoin, 2, "1216\tslurm 8.0"), opJoin, "12", "16\tslurm 8.0", false},
		{"join without a job", body(opJoin, 2, "1216"), opJoin, "12", "16", false},
		{"join not a number", body(opJoin, 2, "x14"), 0, "", "", true},
		{"join negative", body(opJoin, 2, "-14"), 0, "", "", true},
		{"join too large", body(opJoin, 8, "167772164"), 0, "", "", true},
		{"join without a size", body(opJoin, 1, "1"), 0, "", "", true},
		{"join with size 0", body(opJoin, 1, "10\tj"), 0, "", "", true},
		{"join with a job too long", body(opJoin, 1, "14\t"+strings.Repeat("j", maxReason)), 0, "", "", true},
		{"leave", body(opLeave, 0, "why"), opLeave, "", "why", false},
		{"leave with a key", body(opLeave, 1, "kwhy"), 0, "", "", true},
		{"leave reason too long", body(opLeave, 0, strings.Repeat("w", maxReason+1)), 0, "", "", true},
		{"departures", body(opDepartures, 0, "\x10\x00\x00\x00"), opDepartures, "", "\x10\x00\x00\x00", false},
		{"departures short wait", body(opDepartures, 0, "\x10"), 0, "", "", true},
		{"largest", body(opPut, MaxKey, strings.Repeat("k", MaxKey)+strings.Repeat("v", MaxValue)), opPut, strings.Repeat("k", MaxKey), strings.Repeat("v", MaxValue), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, key, val, err := parseRequest(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("parseRequest: %v, want %v", err, ErrBadFrame)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRequest: %v", err)
			}
			if op != tt.op || key != tt.key || string(val) != tt.val {
				t.Fatalf("parseRequest = %d %.20q %.20q, want %d %.20q %.20q", op, key, val, tt.op, tt.key, tt.val)
			}
		})
	}
}

func TestReadRequest(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"round trip", request(opPut, "k", []byte("v")), nil},
		{"nothing", nil, io.EOF},
		{"half a length", []byte{1, 0}, ErrBadFrame},
		{"zero length", []byte{0, 0, 0, 0}, ErrBadFrame},
		{"over the limit", binary.LittleEndian.AppendUint32(nil, maxFrame+1), ErrBadFrame},
		{"truncated body", append(binary.LittleEndian.AppendUint32(nil, 10), opPut, 1, 0), ErrBadFrame},
		{"bad body", append(binary.LittleEndian.AppendUint32(nil, 4), opGet, 5, 0, 'k'), ErrBadFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, key, val, err := readRequest(bufio.NewReader(bytes.NewReader(tt.in)))
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("readRequest: %v, want %v", err, tt.want)
			}
			if tt.want == nil && (op != opPut || key != "k" || string(val) != "v") {
				t.Fatalf("readRequest = %d %q %q", op, key, val)
			}
		})
	}
}

// FuzzParseRequest: parseRequest never panics, and accepts a request only
// if its declared key length accounts exactly for the body.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte{opPut, 3, 0, 'k', 'e', 'y', 'v'})
	f.Add([]byte{opGet, 3, 0, 'k', 'e', 'y'})
	f.Add([]byte{opGet, 4, 0, 'k', 'e', 'y'})
	f.Add([]byte{opPut, 0xff, 0xff})
	f.Add([]byte{})
	f.Add([]byte{opJoin, 1, 0, '3', '4', '\t', 'j'})
	f.Add([]byte{opJoin, 2, 0, '-', '3'})
	f.Add([]byte{opLeave, 0, 0, 'w', 'h', 'y'})
	f.Add([]byte{opDepartures, 0, 0, 100, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		op, key, val, err := parseRequest(body)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		if len(body) < 3 {
			t.Fatalf("accepted a %d-byte request", len(body))
		}
		klen := int(binary.LittleEndian.Uint16(body[1:]))
		switch {
		case op != body[0]:
			t.Fatalf("op %d, body says %d", op, body[0])
		case len(key) != klen || klen > MaxKey:
			t.Fatalf("key of %d bytes, declared %d", len(key), klen)
		case 3+len(key)+len(val) != len(body):
			t.Fatalf("key %d + value %d bytes do not add up to the %d-byte body", len(key), len(val), len(body))
		case key != string(body[3:3+klen]) || !bytes.Equal(val, body[3+klen:]):
			t.Fatal("key or value not taken from where the lengths say")
		case len(val) > MaxValue:
			t.Fatalf("accepted a %d-byte value", len(val))
		case op == opGet && len(val) != 0:
			t.Fatal("accepted a get with a value")
		case op == opDepartures && len(val) != 4:
			t.Fatalf("accepted a departures request with a %d-byte wait", len(val))
		case op == opLeave && len(val) > maxReason:
			t.Fatalf("accepted a %d-byte leave reason", len(val))
		}
	})
}

// TestDepartures: the store tells who left the job abnormally, in order, and
// fails gets still waiting; a normal leave is not a departure.
func TestDepartures(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	fine, dying, quitting, waiter, asker := dial(t, s), dial(t, s), dial(t, s), dial(t, s), dial(t, s)
	for r, c := range []*Client{fine, dying, quitting, waiter} {
		if err := c.Join(ctx, r, 4, ""); err != nil {
			t.Fatalf("join as rank %d: %v", r, err)
		}
	}
	if err := fine.Leave(ctx, ""); err != nil {
		t.Fatal(err)
	}
	fine.Close()
	if ds, err := asker.Departures(ctx, 50*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("after a normal leave: departures %v, %v; want none", ds, err)
	}

	got := make(chan error, 1)
	go func() {
		_, err := waiter.Get(ctx, "never/put")
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the get reach the store
	dying.Close()                     // as the kernel does for a killed process
	select {
	case err := <-got:
		if !errors.Is(err, ErrRankGone) || !strings.Contains(err.Error(), "rank 1 die") {
			t.Fatalf("waiting get: %v, want ErrRankGone naming rank 1", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a get waiting for a dead rank's key did not fail")
	}
	if err := quitting.Leave(ctx, "checkpoint\nfailed"); err != nil {
		t.Fatal(err)
	}
	s.MarkGone(1, "killed by signal SIGKILL") // a second report of rank 1 does not count
	s.MarkGone(7, "killed by signal SIGKILL")
	ds, err := asker.Departures(ctx, time.Second)
	want := "[rank 1 die (its rendezvous connection closed without goodbye) rank 2 give up: checkpoint?failed rank 7 killed by signal SIGKILL]"
	if err != nil || fmt.Sprint(ds) != want {
		t.Fatalf("departures %v, %v; want %s", ds, err, want)
	}
	if _, err := asker.Get(ctx, "also/never"); !errors.Is(err, ErrRankGone) {
		t.Fatalf("get after a departure: %v, want ErrRankGone", err)
	}
	// What grun asks of the store to name a rank that exited 0 without
	// closing its communicator.
	for _, c := range []struct {
		rank                  int
		withoutGoodbye, first bool
	}{{0, false, false}, {1, true, true}, {2, false, false}, {7, false, false}} {
		if got := s.LeftWithoutGoodbye(c.rank); got != c.withoutGoodbye {
			t.Errorf("LeftWithoutGoodbye(%d) = %v, want %v", c.rank, got, c.withoutGoodbye)
		}
		if got := s.LeftFirst(c.rank); got != c.first {
			t.Errorf("LeftFirst(%d) = %v, want %v", c.rank, got, c.first)
		}
	}
}

// TestDeparturesWait: a departures request returns at the first departure,
// not at the end of its wait, and an empty list when the wait ends.
func TestDeparturesWait(t *testing.T) {
	s := newServer(t, testToken)
	ctx := testCtx(t)
	start := time.Now()
	if ds, err := dial(t, s).Departures(ctx, 100*time.Millisecond); err != nil || len(ds) != 0 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("departures %v, %v after %v; want none after 100ms", ds, err, time.Since(start))
	}
	time.AfterFunc(50*time.Millisecond, func() { s.MarkGone(3, "exited with status 1") })
	start = time.Now()
	ds, err := dial(t, s).Departures(ctx, 10*time.Second)
	if err != nil || len(ds) != 1 || ds[0].Rank != 3 || time.Since(start) > 5*time.Second {
		t.Fatalf("departures %v, %v after %v; want rank 3 at once", ds, err, time.Since(start))
	}
	if err := dial(t, s).Join(ctx, -1, 1, ""); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("join as -1: %v, want ErrBadFrame", err)
	}
}

// TestStoreResetNotRefused: a client that proved the token and whose
// connection is then reset mid-request (a rank killed, or one that gave
// up) is not a stranger: Refused, which grun reports as possible
// intrusions, does not count it.
func TestStoreResetNotRefused(t *testing.T) {
	s := newServer(t, testToken)
	c := rawConn(t, s)
	req := request(opPut, "k", []byte("some value"))
	if _, err := c.Write(req[:len(req)-3]); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetLinger(0) // Close sends a reset
	c.Close()
	time.Sleep(100 * time.Millisecond)
	if n := s.Refused(); n != 0 {
		t.Errorf("Refused() = %d after a client's reset, want 0", n)
	}
}

// TestStoreStrangerFlood opens 200 idle connections to a store that
// authenticates 8 at a time with a 200 ms deadline (a bounded loop that
// ends by itself): no more than 8 are ever authenticating, each is cut off,
// and a real rank is served meanwhile.
func TestStoreStrangerFlood(t *testing.T) {
	const strangers = 200
	savedT, savedMax := handshakeTimeout, preAuthMax
	handshakeTimeout, preAuthMax = 200*time.Millisecond, 8
	s := newServer(t, testToken)
	handshakeTimeout, preAuthMax = savedT, savedMax

	conns := make([]net.Conn, 0, strangers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range strangers {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	checkServes(t, s)
	// Every stranger is cut off: end of stream after the store's hello at most.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := io.Copy(io.Discard, c); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || n > 40 {
			t.Fatalf("stranger %d: read %d bytes, %v; want cut off after at most a hello", i, n, err)
		}
	}
	eventually(t, fmt.Sprintf("Refused() == %d", strangers), func() bool { return s.Refused() == strangers })
	if p := s.gate.Peak(); p > 8 {
		t.Errorf("%d connections authenticating at once, want at most 8", p)
	}
	// 200 silent strangers, 8 at a time, 200 ms each: about 5 s.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the flood took %v to clear", took)
	}
}
