//go:build linux

package shm_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
)

// openFDs counts this process's descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list descriptors: %v", err)
	}
	return len(ents)
}

// settledFDs counts this process's descriptors once the count has held
// for a moment, so that connections an earlier test's cleanup is still
// closing do not blur a count of the ones a test opens.
func settledFDs(t *testing.T) int {
	t.Helper()
	n := openFDs(t)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		m := openFDs(t)
		if m == n {
			break
		}
		n = m
	}
	return n
}

// fdsReach waits, up to 10 seconds, for this process to hold want
// descriptors, and returns the last count: descriptors being closed by
// goroutines that have yet to run go away, a leaked one stays.
func fdsReach(t *testing.T, want int) int {
	t.Helper()
	n := openFDs(t)
	for deadline := time.Now().Add(10 * time.Second); n != want && time.Now().Before(deadline); n = openFDs(t) {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// ringMaps counts this process's mappings of rings.
func ringMaps(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatalf("read mappings: %v", err)
	}
	return strings.Count(string(b), "memfd:gocoll-shm")
}

// exchange has a and b send each other one message and receive it, both
// at once.
func exchange(ctx context.Context, ts []*shm.Transport, a, b int) error {
	errs := make(chan error, 2)
	for _, pr := range [][2]int{{a, b}, {b, a}} {
		go func() {
			me, them := ts[pr[0]], pr[1]
			if err := me.Send(ctx, them, []byte("hi")); err != nil {
				errs <- err
				return
			}
			m, err := me.Recv(ctx, them)
			if err == nil {
				me.Release(m)
			}
			errs <- err
		}()
	}
	return errors.Join(<-errs, <-errs)
}

// TestLinksOnlyPartners runs a job of 4 whose ranks talk in the pairs
// {0,1} and {2,3}, and 0 with 3: only those pairs get rings and sockets.
func TestLinksOnlyPartners(t *testing.T) {
	ts := mesh(t, 4, shm.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r, tr := range ts {
		if n := tr.Links(); n != 0 {
			t.Fatalf("rank %d has %d links after Connect, want none", r, n)
		}
	}
	fds, maps := settledFDs(t), ringMaps(t)
	pairs := [][2]int{{0, 1}, {2, 3}, {0, 3}}
	for _, p := range pairs {
		if err := exchange(ctx, ts, p[0], p[1]); err != nil {
			t.Fatalf("pair %v: %v", p, err)
		}
	}
	for r, want := range []int{2, 1, 1, 2} {
		if n := ts[r].Links(); n != want {
			t.Errorf("rank %d has %d links, want %d", r, n, want)
		}
	}
	// Each pair: one socket at each end, and two rings each mapped by
	// both ends (the memfds themselves are closed once mapped). When both
	// ends dial at once, the declined connection is closed by a goroutine
	// after the exchange returns, so wait for the count to come down.
	if got := fdsReach(t, fds+2*len(pairs)) - fds; got != 2*len(pairs) {
		t.Errorf("linking %d pairs opened %d descriptors, want %d", len(pairs), got, 2*len(pairs))
	}
	if got := ringMaps(t) - maps; got != 4*len(pairs) {
		t.Errorf("linking %d pairs made %d ring mappings, want %d", len(pairs), got, 4*len(pairs))
	}
	// Calls on linked pairs make nothing new.
	if err := exchange(ctx, ts, 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := ringMaps(t) - maps; got != 4*len(pairs) {
		t.Errorf("a second exchange changed the ring mappings to %d, want %d", got, 4*len(pairs))
	}
}

// TestThirdRankWait is the case that deadlocks if only one end of a pair
// may make its link: rank 0 sends to rank 1, which is receiving from rank
// 2, which is receiving from rank 0. Every first contact happens while
// the other end is busy with a third rank.
func TestThirdRankWait(t *testing.T) {
	ts := mesh(t, 3, shm.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recv := func(tr *shm.Transport, from int) error {
		m, err := tr.Recv(ctx, from)
		if err == nil {
			tr.Release(m)
		}
		return err
	}
	errs := make(chan error, 3)
	go func() { // rank 0
		errs <- errors.Join(ts[0].Send(ctx, 1, []byte("to 1")), ts[0].Send(ctx, 2, []byte("to 2")))
	}()
	go func() { // rank 1
		errs <- errors.Join(recv(ts[1], 2), recv(ts[1], 0))
	}()
	go func() { // rank 2
		errs <- errors.Join(recv(ts[2], 0), ts[2].Send(ctx, 1, []byte("to 1")))
	}()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeadBeforeContact kills a rank that nobody has talked to: a Recv
// from it and a Send to it fail with ErrPeerLost naming it, and Lost
// fires, instead of waiting for a rank that will never answer.
func TestDeadBeforeContact(t *testing.T) {
	token := []byte("fault-token")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, cmd, out := startChild(t, ctx, "quiet", token)
	ts := make([]*shm.Transport, 2)
	for r := range ts {
		store, err := bootstrap.Dial(ctx, srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if ts[r], err = shm.Connect(ctx, store, r, 3, token, shm.Options{}); err != nil {
			t.Fatal(err)
		}
		defer ts[r].Close()
	}
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	lost := func(what string, err error) {
		t.Helper()
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 2 {
			t.Fatalf("%s the rank killed before contact: %v, want ErrPeerLost naming rank 2", what, err)
		}
	}
	start := time.Now()
	_, err := ts[0].Recv(ctx, 2)
	lost("recv from", err)
	t.Logf("recv failed after %v: %v", time.Since(start), err)
	lost("send to", ts[1].Send(ctx, 2, []byte("x")))
	select {
	case <-ts[0].Lost():
		lost("LostErr names", ts[0].LostErr())
	case <-time.After(5 * time.Second):
		t.Fatal("the failed link was not reported through Lost")
	}
	// The live pair still links and works.
	if err := exchange(ctx, ts, 0, 1); err != nil {
		t.Fatalf("live pair after the loss: %v", err)
	}
}

// TestCloseUnlinked closes a job of 4 in which only ranks 0 and 1 ever
// talked, one rank while a peer dials it: every Close returns promptly,
// the linked peer sees an orderly goodbye, and no goroutine, descriptor
// or ring is left behind.
func TestCloseUnlinked(t *testing.T) {
	goroutines, fds, maps := runtime.NumGoroutine(), openFDs(t), ringMaps(t)
	token := []byte("close-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 4
	ts := make([]*shm.Transport, n)
	var stores []*bootstrap.Client
	for r := range ts {
		store, err := bootstrap.Dial(ctx, srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, store)
		if ts[r], err = shm.Connect(ctx, store, r, n, token, shm.Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 4 << 10}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := exchange(ctx, ts, 0, 1); err != nil {
		t.Fatal(err)
	}
	// Rank 3 waits on rank 2 (lower, so it dials at once) while rank 2
	// closes: the Recv ends, linked or not, with an error.
	recvErr := make(chan error, 1)
	go func() {
		m, err := ts[3].Recv(ctx, 2)
		if err == nil {
			ts[3].Release(m)
			err = errors.New("received a message nobody sent")
		}
		recvErr <- err
	}()
	ts[2].Close()
	ts[0].Close()
	if _, err := ts[1].Recv(ctx, 0); !errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("recv from a linked peer that closed: %v, want ErrPeerClosed", err)
	}
	select {
	case err := <-recvErr:
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Peer != 2 {
			t.Errorf("recv from a rank that closed around its first contact: %v, want an error naming rank 2", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("recv from a rank that closed still waits after 10s")
	}
	var wg sync.WaitGroup
	for _, tr := range ts[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); tr.Close() }()
	}
	closed := make(chan struct{})
	go func() { wg.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close with unlinked peers still runs after 10s")
	}
	for _, s := range stores {
		s.Close()
	}
	srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, f, m := runtime.NumGoroutine(), openFDs(t), ringMaps(t)
		if g <= goroutines && f <= fds && m <= maps {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %d goroutines (from %d), %d descriptors (from %d), %d ring mappings (from %d)",
				g, goroutines, f, fds, m, maps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
