//go:build cgo && linux

package rdma

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// linkCounts reports how many queue pairs each rank has made.
func linkCounts(ts []transport.Transport) []int {
	n := make([]int, len(ts))
	for i, tr := range ts {
		n[i] = tr.(*Transport).queuePairs()
	}
	return n
}

// TestOnDemand: in a job of 4 where only ranks 0 and 1 talk, they make
// one queue pair each, and ranks 2 and 3 none: no memory, no queue pair,
// no exchange for peers never used.
func TestOnDemand(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 4, Options{})
	if got := linkCounts(ts); fmt.Sprint(got) != "[0 0 0 0]" {
		t.Fatalf("queue pairs after Connect: %v, want none", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			for i := range 10 {
				if err := ts[r].Send(ctx, 1-r, []byte{byte(r), byte(i)}); err != nil {
					errs <- err
					return
				}
				m, err := ts[r].Recv(ctx, 1-r)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(m.Data, []byte{byte(1 - r), byte(i)}) {
					errs <- fmt.Errorf("rank %d got % x", r, m.Data)
					return
				}
				ts[r].Release(m)
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := linkCounts(ts); fmt.Sprint(got) != "[1 1 0 0]" {
		t.Fatalf("queue pairs per rank: %v, want [1 1 0 0]", got)
	}
}

// TestEager: with Options.Eager every queue pair is up when Connect
// returns.
func TestEager(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 4, Options{LinkOptions: transport.LinkOptions{Eager: true}})
	if got := linkCounts(ts); fmt.Sprint(got) != "[3 3 3 3]" {
		t.Fatalf("queue pairs after an eager Connect: %v, want 3 per rank", got)
	}
	for r := range 4 {
		tr := ts[r].(*Transport)
		for q := range tr.peers {
			if p := tr.peers[q].Load(); q != r && (p == nil || !p.isUp()) {
				t.Errorf("rank %d: queue pair to rank %d not up after an eager Connect", r, q)
			}
		}
	}
}

// TestBothDial: both ends of a pair need it at once, the higher rank
// starting a little later each time, around the lower rank's grace, so
// that both dial in some of the runs: one queue pair per end, and the
// messages go through.
func TestBothDial(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	for _, d := range []time.Duration{0, mesh.DialGrace - 5*time.Millisecond, mesh.DialGrace, mesh.DialGrace + 5*time.Millisecond, 2 * mesh.DialGrace} {
		t.Run(d.String(), func(t *testing.T) {
			ts := newMesh(t, 2, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs := make(chan error, 2)
			for r := range 2 {
				go func() {
					if r == 1 {
						time.Sleep(d)
					}
					if err := ts[r].Send(ctx, 1-r, []byte{byte(r)}); err != nil {
						errs <- err
						return
					}
					m, err := ts[r].Recv(ctx, 1-r)
					if err == nil && (len(m.Data) != 1 || m.Data[0] != byte(1-r)) {
						err = fmt.Errorf("rank %d got % x", r, m.Data)
					}
					errs <- err
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got := linkCounts(ts); fmt.Sprint(got) != "[1 1]" {
				t.Fatalf("queue pairs per rank: %v, want [1 1]", got)
			}
		})
	}
}

// TestFirstContactAllAtOnce: every rank of 4 sends to every other first,
// then receives: every pair is made by both ends at once.
func TestFirstContactAllAtOnce(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	const n = 4
	ts := newMesh(t, n, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, n)
	for r := range n {
		go func() {
			for k := 1; k < n; k++ {
				if err := ts[r].Send(ctx, (r+k)%n, []byte{byte(r)}); err != nil {
					errs <- err
					return
				}
			}
			for k := 1; k < n; k++ {
				from := (r + n - k) % n
				m, err := ts[r].Recv(ctx, from)
				if err != nil {
					errs <- err
					return
				}
				if len(m.Data) != 1 || m.Data[0] != byte(from) {
					errs <- fmt.Errorf("rank %d from %d: % x", r, from, m.Data)
					return
				}
				ts[r].Release(m)
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := linkCounts(ts); fmt.Sprint(got) != "[3 3 3 3]" {
		t.Fatalf("queue pairs per rank: %v, want 3 each", got)
	}
}

// TestNoDeadlock: rank a sends to b while b receives from c, who waits for
// a. If a queue pair could only be made with both ends in a call for
// each other, a's Send would wait for b, b for c and c for a. Both
// orders of the ranks, so that a dials at once in one and waits its
// grace for b in the other.
func TestNoDeadlock(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	for _, abc := range [][3]int{{0, 2, 1}, {2, 0, 1}} {
		a, b, c := abc[0], abc[1], abc[2]
		t.Run(fmt.Sprintf("a=%d,b=%d,c=%d", a, b, c), func(t *testing.T) {
			ts := newMesh(t, 3, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			recv := func(r, from int, want string) error {
				m, err := ts[r].Recv(ctx, from)
				if err != nil {
					return err
				}
				defer ts[r].Release(m)
				if string(m.Data) != want {
					return fmt.Errorf("rank %d from %d: %q, want %q", r, from, m.Data, want)
				}
				return nil
			}
			errs := make(chan error, 3)
			go func() {
				err := ts[a].Send(ctx, b, []byte("a to b"))
				if err == nil {
					err = ts[a].Send(ctx, c, []byte("a to c"))
				}
				errs <- err
			}()
			go func() {
				err := recv(b, c, "c to b")
				if err == nil {
					err = recv(b, a, "a to b")
				}
				errs <- err
			}()
			go func() {
				err := recv(c, a, "a to c")
				if err == nil {
					err = ts[c].Send(ctx, b, []byte("c to b"))
				}
				errs <- err
			}()
			for range 3 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStranger: a connection to the connection manager without the job's
// token is refused and counted, and makes no queue pair.
func TestStranger(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 2, Options{})
	tr := ts[0].(*Transport)
	c, err := net.Dial("tcp", tr.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write(bytes.Repeat([]byte("GET / HTTP/1.0\r\n"), 4))
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for tr.door.Refused() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tr.door.Refused() != 1 || tr.queuePairs() != 0 {
		t.Fatalf("after a stranger: %d refused, %d queue pairs; want 1 and 0", tr.door.Refused(), tr.queuePairs())
	}
}

// TestOptionMismatch: ranks whose slot options differ fail their first
// exchange with ErrMismatch on both ends, the dialer's error saying what
// differs (the answering end checks first; it used to hang up without a
// word, leaving the dialer with "read verdict: EOF").
func TestOptionMismatch(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts, err := tryMeshEach(t, 2, func(r int) Options {
		if r == 1 {
			return Options{LinkOptions: transport.LinkOptions{Slots: 4}}
		}
		return Options{LinkOptions: transport.LinkOptions{Slots: 8}}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = ts[0].Send(ctx, 1, []byte{1})
	if !errors.Is(err, ErrMismatch) || !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "same transport options") {
		t.Fatalf("send to a rank with other slot options: %v; want ErrMismatch and ErrPeerLost, saying the options must match", err)
	}
	t.Logf("dialer: %v", err)
	if n := ts[1].queuePairs(); n != 0 {
		t.Fatalf("the answering rank made %d queue pairs for a mismatched dialer, want 0", n)
	}
}

const silentEnv = "GOCOLL_RDMA_TEST_SILENT"

// silentChild is rank 1 of a two-rank job that connects, says so on
// stdout, and waits to be killed without ever talking to rank 0.
func silentChild(addr string) int {
	if _, err := connectRankOne(addr); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println("connected")
	select {}
}

// TestDiedBeforeContact: a peer killed after Connect but before any call
// needed it: a Recv from it must fail, within moments, with ErrPeerLost
// naming it, not wait for messages that will never come; and the loss is
// announced.
func TestDiedBeforeContact(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, w := io.Pipe()
	defer w.Close()
	tr, cmd := startRankOne(t, ctx, silentEnv, w)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "connected" {
		t.Fatalf("child: %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	_, err = tr.Recv(ctx, 1)
	took := time.Since(killed)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 1 {
		t.Fatalf("recv from a peer that died before any contact: %v, want ErrPeerLost naming rank 1", err)
	}
	if took > 10*time.Second {
		t.Fatalf("the loss took %v to notice", took)
	}
	select {
	case <-tr.Lost():
	default:
		t.Fatal("Lost() not closed after the peer was lost")
	}
	if _, err := tr.Recv(ctx, 1); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("a second recv: %v, want ErrPeerLost again", err)
	}
	t.Logf("noticed after %v: %v", took, err)
}

// TestCloseUnlinked: closing ranks that made few or no queue pairs, all
// at once, returns promptly and without errors.
func TestCloseUnlinked(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 3, Options{CloseLinger: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts[0].Send(ctx, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, tr := range ts {
		wg.Add(1)
		go func() { defer wg.Done(); tr.Close() }()
	}
	wg.Wait()
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Close took %v", d)
	}
}

// TestAbortAfterFirstContact: a queue pair made on demand carries an
// abort's cause like one made at Connect.
func TestAbortAfterFirstContact(t *testing.T) {
	if !haveDevice(t) {
		return
	}
	ts := newMesh(t, 2, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ts[1].Send(ctx, 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := ts[0].Recv(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ts[0].Release(m)
	ts[1].(transport.Aborter).Abort(errors.New("test abort"))
	_, err = ts[0].Recv(ctx, 1)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "rank 1 gave up: test abort") {
		t.Fatalf("recv from an aborted peer: %v, want ErrPeerLost naming rank 1 and the cause", err)
	}
}
