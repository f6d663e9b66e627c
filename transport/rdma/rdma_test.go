//go:build cgo && linux

package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
)

// The tests that need a device run against the one GOCOLL_IB_DEV names
// (vmtest/run sets rxe0), and fail, not skip, when it does not work.
// Without it, as on a host with no RDMA, each of them checks instead that
// the transport says clearly why it cannot run.
func testDevice() string { return os.Getenv("GOCOLL_IB_DEV") }

// haveDevice returns whether the test can use a device; when not, it has
// checked that Connect reports RDMA unavailable rather than hang or crash.
func haveDevice(t testing.TB) bool {
	t.Helper()
	if testDevice() != "" {
		return true
	}
	_, err := tryMesh(t, 2, Options{})
	if !errors.Is(err, ErrUnavailable) || !(errors.Is(err, ErrNoDevice) || errors.Is(err, ErrNoLibrary)) {
		t.Fatalf("GOCOLL_IB_DEV is not set and this host has no RDMA device, so Connect must fail with ErrNoDevice or ErrNoLibrary; got %v", err)
	}
	t.Logf("no RDMA device here (GOCOLL_IB_DEV unset); Connect said: %v", err)
	return false
}

func newStore(t testing.TB) (*bootstrap.Server, []byte) {
	token := []byte("rdma-test-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, token
}

// tryMesh connects n in-process ranks through a real rendezvous store, as
// separate processes would, and returns the first rank's error.
func tryMesh(t testing.TB, n int, opts Options) ([]*Transport, error) {
	t.Helper()
	return tryMeshEach(t, n, func(int) Options { return opts })
}

// tryMeshEach is tryMesh with each rank's options of its own.
func tryMeshEach(t testing.TB, n int, rankOpts func(r int) Options) ([]*Transport, error) {
	t.Helper()
	srv, token := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ts := make([]*Transport, n)
	errs := make([]error, n)
	// The stores serve the links made on demand until the transports
	// close.
	stores := make([]*bootstrap.Client, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			store, err := bootstrap.Dial(context.Background(), srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			stores[r] = store
			opts := rankOpts(r)
			if opts.Device == "" {
				opts.Device = testDevice()
			}
			if opts.Spin == 0 {
				opts.Crowded = opts.Crowded || n > runtime.NumCPU()
			}
			ts[r], errs[r] = Connect(ctx, store, r, n, token, opts)
			if errs[r] != nil {
				cancel() // the others would wait for this rank's records
			}
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func(tr *Transport) { defer wg.Done(); tr.Close() }(tr)
			}
		}
		wg.Wait()
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	})
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return ts, err
		}
	}
	return ts, errors.Join(errs...)
}

func newMesh(t testing.TB, n int, opts Options) []transport.Transport {
	t.Helper()
	ts, err := tryMesh(t, n, opts)
	if err != nil {
		t.Fatalf("connect %d ranks on %q: %v", n, testDevice(), err)
	}
	out := make([]transport.Transport, n)
	for i, tr := range ts {
		out[i] = tr
	}
	return out
}

func TestProbe(t *testing.T) {
	dev, err := Probe(Options{Device: testDevice()})
	if testDevice() == "" {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Probe on a host without RDMA: got (%q, %v), want an error wrapping ErrUnavailable", dev, err)
		}
		t.Logf("Probe: %v", err)
		return
	}
	if err != nil || !strings.HasPrefix(dev, testDevice()+" port ") {
		t.Fatalf("Probe(%s) = %q, %v", testDevice(), dev, err)
	}
}

func TestWrongDevice(t *testing.T) {
	_, err := tryMesh(t, 2, Options{Device: "nosuchdev9"})
	if testDevice() == "" {
		if !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrNoLibrary) {
			t.Fatalf("no device on this host: got %v", err)
		}
		return
	}
	if !errors.Is(err, ErrDeviceNotFound) || !strings.Contains(err.Error(), "nosuchdev9") || !strings.Contains(err.Error(), testDevice()) {
		t.Fatalf("got %v, want ErrDeviceNotFound naming nosuchdev9 and listing %s", err, testDevice())
	}
	t.Logf("%v", err)
}

func TestBadGIDIndex(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	_, err := tryMesh(t, 2, Options{GIDIndex: 250})
	if !errors.Is(err, ErrBadGID) {
		t.Fatalf("GID index 250: got %v, want ErrBadGID", err)
	}
	t.Logf("%v", err)
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{LinkOptions: transport.LinkOptions{Slots: 1}}, {LinkOptions: transport.LinkOptions{Slots: 1000}}, {LinkOptions: transport.LinkOptions{SlotSize: 100}}, {LinkOptions: transport.LinkOptions{SlotSize: 32 << 20}}, {Timeout: 40}, {RetryCount: 9}, {GIDIndex: -1}} {
		if _, err := Connect(context.Background(), nil, 0, 2, nil, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", o, err)
		}
	}
	if _, err := Connect(context.Background(), nil, 2, 2, nil, Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("rank 2 of 2: got %v, want ErrInvalid", err)
	}
}

func TestConformance(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	conformance.Run(t, func(t testing.TB, n int) []transport.Transport { return newMesh(t, n, Options{}) })
}

// TestConformanceSmallSlots makes every size span many messages and
// senders wait on credits all the time, and sends everything inline-free;
// its queue pairs are made eagerly, at Connect.
func TestConformanceSmallSlots(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport {
		return newMesh(t, n, Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10, Eager: true}, MaxInline: -1})
	})
}

// TestStream checks order and content across inline, staged and empty
// messages in both directions at once, with few slots.
// TestStream sends a stream of messages of every size each way at once.
// "spinning" keeps every engine polling for good (no sleep, which is
// where owed credits used to go back): with four slots, one credit owed
// below the batch of two then stayed owed, and both senders waited for it.
func TestStream(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"sleeping", Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 64 << 10}}},
		{"spinning", Options{LinkOptions: transport.LinkOptions{Slots: 4, SlotSize: 64 << 10, Spin: time.Hour}}},
	} {
		t.Run(tc.name, func(t *testing.T) { stream(t, tc.opts) })
	}
}

func stream(t *testing.T, opts Options) {
	ts := newMesh(t, 2, opts)
	const count = 300
	msg := func(from, i int) []byte {
		n := []int{0, 1, 7, 64, 255, 256, 257, 4096, 64 << 10}[i%9]
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(from*31 + i + j)
		}
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 4)
	for r := 0; r < 2; r++ {
		go func(r int) {
			for i := 0; i < count; i++ {
				if err := ts[r].Send(ctx, 1-r, msg(r, i)); err != nil {
					errs <- fmt.Errorf("rank %d send %d: %w", r, i, err)
					return
				}
			}
			errs <- nil
		}(r)
		go func(r int) {
			for i := 0; i < count; i++ {
				m, err := ts[r].Recv(ctx, 1-r)
				if err != nil {
					errs <- fmt.Errorf("rank %d recv %d: %w", r, i, err)
					return
				}
				if want := msg(1-r, i); !bytes.Equal(m.Data, want) {
					errs <- fmt.Errorf("rank %d message %d: got %d bytes, want %d (content differs: %v)", r, i, len(m.Data), len(want), len(m.Data) == len(want))
					return
				}
				ts[r].Release(m)
			}
			errs <- nil
		}(r)
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCreditsRideWithData: two ranks exchanging messages, as every step
// of a collective does, return each other's credits in their data
// writes' immediates, not in messages of their own; and nothing is lost
// or reordered on the way.
func TestCreditsRideWithData(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 2, Options{LinkOptions: transport.LinkOptions{Slots: 4, SlotSize: 4 << 10}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds = 200
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func(r int) {
			tr := ts[r].(*Transport)
			for i := 0; i < rounds; i++ {
				out := []byte{byte(r), byte(i), byte(i >> 8), 0, 0, 0, 0, 7}
				if i%5 == 0 {
					out = bytes.Repeat(out, 64) // 512 bytes: staged, not inline
				}
				if err := tr.Send(ctx, 1-r, out); err != nil {
					errs <- fmt.Errorf("rank %d send %d: %w", r, i, err)
					return
				}
				m, err := tr.Recv(ctx, 1-r)
				if err != nil {
					errs <- fmt.Errorf("rank %d recv %d: %w", r, i, err)
					return
				}
				if len(m.Data) != len(out) || m.Data[0] != byte(1-r) || m.Data[1] != byte(i) || m.Data[2] != byte(i>>8) {
					errs <- fmt.Errorf("rank %d exchange %d: got % x", r, i, m.Data[:min(len(m.Data), 8)])
					return
				}
				tr.Release(m)
			}
			errs <- nil
		}(r)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r := 0; r < 2; r++ {
		p := ts[r].(*Transport).peers[1-r].Load()
		p.smu.Lock()
		n := p.creditMsgs
		p.smu.Unlock()
		t.Logf("rank %d: %d credit messages of its own in %d exchanges", r, n, rounds)
		// Each exchange's release is carried by the next send; only a
		// rank that waits before its peer released (its engine then finds
		// the queue empty) sends one alone, and not every round.
		if n > rounds/4 {
			t.Errorf("rank %d sent %d credit messages of their own in %d exchanges; credits should ride with the data", r, n, rounds)
		}
	}
}

// TestSendParts runs the PartSender checks over RDMA, whose credits come
// back on their own, some time after a release.
func TestSendParts(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	conformance.PartSender(t, newMesh(t, 2, Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4096}}), 4096)
}

// TestZeroCopy: a send whose body lies in registered memory and is at
// least ZeroCopyMin long is written straight from it, and the caller's
// buffer is free when the send returns; smaller bodies, bodies outside
// every region and deregistered memory go through the staging slot; bad
// registrations are refused.
func TestZeroCopy(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	const zcMin = 64 << 10
	ts := newMesh(t, 2, Options{LinkOptions: transport.LinkOptions{Slots: 4, SlotSize: 256 << 10}, ZeroCopyMin: zcMin})
	tx, rx := ts[0].(*Transport), ts[1].(*Transport)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	buf := make([]byte, 1<<20)
	other := make([]byte, 1<<20)
	fill := func(b []byte, seed byte) {
		for i := range b {
			b[i] = seed + byte(i*7)
		}
	}
	fill(buf, 1)
	fill(other, 2)
	deregister, err := tx.Register(buf[4096:])
	if err != nil {
		t.Fatal(err)
	}
	zeroCopies := func() int {
		p := tx.peers[1].Load()
		if p == nil {
			return 0 // no queue pair yet
		}
		p.smu.Lock()
		defer p.smu.Unlock()
		return p.zeroCopies
	}
	head := []byte("sixteen byte hdr")
	for _, tc := range []struct {
		name string
		head []byte
		body []byte
		zero bool
	}{
		{"registered, with a head", head, buf[5000 : 5000+200<<10], true},
		{"registered, no head", nil, buf[len(buf)-zcMin:], true},
		{"registered, the whole slot", nil, buf[4096 : 4096+256<<10], true},
		{"registered, below the minimum", head, buf[8192 : 8192+zcMin-1], false},
		{"starts before the region", head, buf[4000 : 4000+zcMin], false},
		{"not registered", head, other[:100<<10], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := append(append([]byte(nil), tc.head...), tc.body...)
			before := zeroCopies()
			if sent, err := tx.SendParts(ctx, 1, tc.head, tc.body, true); !sent || err != nil {
				t.Fatalf("SendParts: sent %v, err %v", sent, err)
			}
			// The body is the caller's again: what the peer gets must not
			// change with it.
			saved := append([]byte(nil), tc.body...)
			for i := range tc.body {
				tc.body[i] ^= 0xff
			}
			m, err := rx.Recv(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Data, want) {
				t.Errorf("got %d bytes, want %d: not what was sent", len(m.Data), len(want))
			}
			rx.Release(m)
			copy(tc.body, saved)
			if got := zeroCopies() - before; got != map[bool]int{true: 1, false: 0}[tc.zero] {
				t.Errorf("%d zero-copy sends, want zero-copy %v", got, tc.zero)
			}
		})
	}
	if err := deregister(); err != nil {
		t.Fatal(err)
	}
	if err := deregister(); err != nil {
		t.Fatalf("second deregister: %v", err)
	}
	before := zeroCopies()
	if err := tx.Send(ctx, 1, buf[8192:8192+zcMin]); err != nil {
		t.Fatal(err)
	}
	m, err := rx.Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, buf[8192:8192+zcMin]) || zeroCopies() != before {
		t.Errorf("send from deregistered memory: %d bytes, equal %v, %d zero-copy sends", len(m.Data), bytes.Equal(m.Data, buf[8192:8192+zcMin]), zeroCopies()-before)
	}
	rx.Release(m)
	if _, err := tx.Register(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Register(nil): %v, want ErrInvalid", err)
	}
	// A registration left at Close goes with the transport.
	if _, err := tx.Register(other); err != nil {
		t.Fatal(err)
	}
	if err := tx.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Register(buf); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Register after Close: %v, want ErrClosed", err)
	}
}

// TestPeerClosed: a peer that closes in order is reported as closed
// (ErrPeerClosed), after what it sent, and is not a loss.
func TestPeerClosed(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 2, Options{CloseLinger: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ts[1].Send(ctx, 0, []byte("last words")); err != nil {
		t.Fatal(err)
	}
	ts[1].Close()
	m, err := ts[0].Recv(ctx, 1)
	if err != nil || string(m.Data) != "last words" {
		t.Fatalf("message sent before Close: %q, %v", m.Data, err)
	}
	ts[0].Release(m)
	_, err = ts[0].Recv(ctx, 1)
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("recv after the peer closed: %v, want ErrPeerClosed", err)
	}
	if err := ts[0].(transport.LossNotifier).LostErr(); err != nil {
		t.Fatalf("an orderly close counted as a loss: %v", err)
	}
}

// TestAbort: the peers of a rank that aborts learn at once. The queue
// pairs are made eagerly: rank 1 never talks to rank 2, and the abort
// notice goes only to peers with a queue pair (without one, a rank
// learns of the abort from the store, which comm watches).
func TestAbort(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 3, Options{LinkOptions: transport.LinkOptions{Eager: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := ts[0].Recv(ctx, 2)
		done <- err
	}()
	// Rank 1 waits on rank 0, which sends nothing: only the loss
	// notification can tell it about rank 2.
	done1 := make(chan error, 1)
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go func() {
		_, err := ts[1].Recv(ctx1, 0)
		done1 <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ts[2].(transport.Aborter).Abort(errors.New("test abort"))
	err := <-done
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 2 {
		t.Fatalf("recv from an aborted peer: %v, want ErrPeerLost naming rank 2", err)
	}
	// The notice carries the cause, so that the peers can tell a rank
	// that gave up from the one that died.
	if !strings.Contains(err.Error(), "rank 2 gave up: test abort") {
		t.Fatalf("recv from an aborted peer: %v, want the abort's cause", err)
	}
	select {
	case <-ts[1].(transport.LossNotifier).Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1 did not notice rank 2's abort")
	}
	lerr := ts[1].(transport.LossNotifier).LostErr()
	if !errors.As(lerr, &pe) || pe.Peer != 2 || !errors.Is(lerr, transport.ErrPeerLost) {
		t.Fatalf("rank 1's LostErr: %v, want ErrPeerLost naming rank 2", lerr)
	}
	cancel1()
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 1's recv from the live rank 0: %v, want context.Canceled", err)
	}
	t.Logf("after %v: %v; rank 1: %v", time.Since(start), err, lerr)
}

const childEnv = "GOCOLL_RDMA_TEST_CHILD"

// TestMain runs the child of TestPeerKilled when asked to.
func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		os.Exit(child(addr))
	}
	if addr := os.Getenv(silentEnv); addr != "" {
		os.Exit(silentChild(addr))
	}
	os.Exit(m.Run())
}

// connectRankOne is the child side of a two-rank job split over two
// processes: it joins the store at addr as rank 1.
func connectRankOne(addr string) (*Transport, error) {
	ctx := context.Background()
	token := []byte("rdma-test-token")
	store, err := bootstrap.Dial(ctx, addr, token)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, store, 1, 2, token, Options{Device: testDevice()})
}

// startRankOne is the parent side: it starts this test binary as rank 1,
// running the child that env names (TestMain), and connects rank 0. The
// child is killed when the test ends.
func startRankOne(t *testing.T, ctx context.Context, env string, stdout io.Writer) (*Transport, *exec.Cmd) {
	t.Helper()
	srv, token := newStore(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+srv.Addr())
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	store, err := bootstrap.Dial(ctx, srv.Addr(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	tr, err := Connect(ctx, store, 0, 2, token, Options{Device: testDevice()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, cmd
}

// child is rank 1 of a two-rank mesh: it streams messages to rank 0 until
// it is killed.
func child(addr string) int {
	tr, err := connectRankOne(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	buf := make([]byte, 64<<10)
	for i := 0; ; i++ {
		buf[0] = byte(i)
		if err := tr.Send(context.Background(), 0, buf[:1+i%len(buf)]); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
	}
}

// TestPeerKilled kills a peer process mid-stream: the survivor's Recv
// must fail within a bounded time with ErrPeerLost naming the rank and
// the work completion status, and the loss must be announced.
func TestPeerKilled(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, cmd := startRankOne(t, ctx, childEnv, nil)
	for i := 0; i < 50; i++ {
		m, err := tr.Recv(ctx, 1)
		if err != nil {
			t.Fatalf("message %d before the kill: %v", i, err)
		}
		if len(m.Data) != 1+i%(64<<10) || m.Data[0] != byte(i) {
			t.Fatalf("message %d: %d bytes starting %d", i, len(m.Data), m.Data[0])
		}
		tr.Release(m)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	const bound = 20 * time.Second
	var got error
	for got == nil && time.Since(killed) < bound+5*time.Second {
		// What the child wrote before it died is still delivered.
		m, err := tr.Recv(ctx, 1)
		if err == nil {
			tr.Release(m)
		}
		got = err
	}
	took := time.Since(killed)
	var pe *transport.PeerError
	if !errors.Is(got, transport.ErrPeerLost) || !errors.As(got, &pe) || pe.Peer != 1 || !strings.Contains(got.Error(), "IBV_WC_") {
		t.Fatalf("after the peer was killed: %v, want ErrPeerLost naming rank 1 and the completion status", got)
	}
	if took > bound {
		t.Fatalf("the loss took %v to notice, bound %v", took, bound)
	}
	select {
	case <-tr.Lost():
	default:
		t.Fatal("Lost() not closed after the peer was lost")
	}
	t.Logf("noticed after %v: %v", took, got)
}

// BenchmarkExchange is one step of a small collective on two ranks:
// "both" has each rank send the other an 8-byte message and receive the
// other's, as an 8-byte allreduce does; "pingpong" has rank 1 answer
// rank 0, as perftest's ib_write_lat and ib_send_lat do, so their
// one-way latency on the same device is half its time per op.
//
// Both ranks are goroutines of this process and share its Go scheduler.
// Give it more Ps than the two that spin: in the 2-CPU Soft-RoCE VM,
// pingpong took 768 µs per op with GOMAXPROCS=2 and 160 µs with 4, in
// one boot. The likely cause: ibv_post_send on rxe does the protocol's
// work inside the call, long enough for sysmon to take the caller's P,
// and with no idle P the runtime starts another thread to look for work,
// which competes with the other rank for the CPUs.
func BenchmarkExchange(b *testing.B) {
	if !haveDevice(b) {
		b.Skip("no RDMA device")
	}
	for _, tc := range []struct {
		name  string
		first bool // rank 1 sends before it receives
	}{{"both", true}, {"pingpong", false}} {
		b.Run(tc.name, func(b *testing.B) {
			ts := newMesh(b, 2, Options{})
			ctx := context.Background()
			errs := make(chan error, 1)
			b.ResetTimer()
			go func() { errs <- exchange(ctx, ts[1], 0, b.N, tc.first) }()
			if err := exchange(ctx, ts[0], 1, b.N, true); err != nil {
				b.Fatal(err)
			}
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// exchange sends peer n 8-byte messages and receives n from it, sending
// first or receiving first.
func exchange(ctx context.Context, t transport.Transport, peer, n int, first bool) error {
	out := make([]byte, 8)
	send := func(i int) error {
		out[0] = byte(i)
		return t.Send(ctx, peer, out)
	}
	for i := 0; i < n; i++ {
		if first {
			if err := send(i); err != nil {
				return err
			}
		}
		m, err := t.Recv(ctx, peer)
		if err != nil {
			return err
		}
		if len(m.Data) != 8 || m.Data[0] != byte(i) {
			t.Release(m)
			return fmt.Errorf("message %d from rank %d: got % x", i, peer, m.Data)
		}
		t.Release(m)
		if !first {
			if err := send(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestAbortWhileHeld: a message a caller still holds stays readable after
// its transport is aborted (a mismatch another rank found can abort it
// while a collective copies out of the message); the slab goes at the
// last Release. Before, Abort unmapped it and the copy faulted.
func TestAbortWhileHeld(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 2, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg := bytes.Repeat([]byte{7}, 4096)
	if err := ts[0].Send(ctx, 1, msg); err != nil {
		t.Fatal(err)
	}
	m, err := ts[1].Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts[1].(transport.Aborter).Abort(errors.New("test abort"))
	if !bytes.Equal(m.Data, msg) {
		t.Fatal("the held message changed when its transport was aborted")
	}
	ts[1].Release(m)
}
