//go:build linux

package shm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
)

// The test binary doubles as a rank of a job: with GOCOLL_SHM_CHILD set it
// joins the mesh described by the environment instead of running tests.
func TestMain(m *testing.M) {
	if os.Getenv("GOCOLL_SHM_CHILD") != "" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child connects as the rank the environment names, sends one message to
// rank 1, says "ready", and waits on its ring for a message from rank 0
// that never comes, until it is killed. With GOCOLL_SHM_CHILD=quiet it
// says "ready" at once and talks to nobody.
func child() error {
	rank, _ := strconv.Atoi(os.Getenv("GOCOLL_SHM_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GOCOLL_SHM_SIZE"))
	token := []byte(os.Getenv("GOCOLL_SHM_TOKEN"))
	ctx := context.Background()
	store, err := bootstrap.Dial(ctx, os.Getenv("GOCOLL_SHM_STORE"), token)
	if err != nil {
		return err
	}
	tr, err := shm.Connect(ctx, store, rank, size, token, shm.Options{LinkOptions: transport.LinkOptions{Spin: 50 * time.Microsecond}})
	if err != nil {
		return err
	}
	if os.Getenv("GOCOLL_SHM_CHILD") == "quiet" {
		// A rank that dies before anyone contacted it.
		fmt.Println("ready")
		select {}
	}
	if err := tr.Send(ctx, 1, []byte("sent before dying")); err != nil {
		return err
	}
	fmt.Println("ready")
	_, err = tr.Recv(ctx, 0)
	return fmt.Errorf("recv returned: %v", err)
}

// startChild starts a rendezvous store and the child rank 2 of a job of
// 3 (see child) in the given mode; both end with the test.
func startChild(t *testing.T, ctx context.Context, mode string, token []byte) (*bootstrap.Server, *exec.Cmd, *bufio.Reader) {
	t.Helper()
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOCOLL_SHM_CHILD="+mode, "GOCOLL_SHM_RANK=2", "GOCOLL_SHM_SIZE=3",
		"GOCOLL_SHM_TOKEN="+string(token), "GOCOLL_SHM_STORE="+srv.Addr())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return srv, cmd, bufio.NewReader(out)
}

func shmEntries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatalf("list /dev/shm: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestPeerKilled runs ranks 0 and 1 here and rank 2 in a child process,
// SIGKILLs the child while rank 0 waits on its ring, and checks that rank 0
// fails promptly with ErrPeerLost naming rank 2, that rank 1, which waits
// on nobody dead, is told through Lost, that what rank 2 delivered before
// dying is still received, and that nothing is left in /dev/shm.
func TestPeerKilled(t *testing.T) {
	before := shmEntries(t)
	token := []byte("fault-token")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, cmd, out := startChild(t, ctx, "1", token)

	ts := make([]*shm.Transport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { store.Close() }) // links are made through it
			ts[r], errs[r] = shm.Connect(ctx, store, r, 3, token, shm.Options{LinkOptions: transport.LinkOptions{Spin: 50 * time.Microsecond}})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer ts[r].Close()
	}
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}

	recvErr := make(chan error, 1)
	go func() {
		_, err := ts[0].Recv(ctx, 2)
		recvErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // let rank 0 spin out and park
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	select {
	case err := <-recvErr:
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 2 {
			t.Fatalf("rank 0 waiting on the dead rank got %v, want ErrPeerLost naming rank 2", err)
		}
		t.Logf("rank 0 failed %v after the kill: %v", time.Since(killed), err)
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0 still waits 5s after its peer was killed")
	}
	select {
	case <-ts[1].Lost():
		var pe *transport.PeerError
		if err := ts[1].LostErr(); !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != 2 {
			t.Fatalf("rank 1 LostErr = %v, want ErrPeerLost naming rank 2", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 1 was not told of the loss")
	}
	m, err := ts[1].Recv(ctx, 2)
	if err != nil || string(m.Data) != "sent before dying" {
		t.Fatalf("rank 1: message delivered before the death: %q, %v", m.Data, err)
	}
	ts[1].Release(m)
	if _, err := ts[1].Recv(ctx, 2); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("rank 1: second recv from the dead rank: %v, want ErrPeerLost", err)
	}
	if err := ts[0].Send(ctx, 2, []byte("x")); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("rank 0: send to the dead rank: %v, want ErrPeerLost", err)
	}
	// The live pair still works.
	if err := ts[0].Send(ctx, 1, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if m, err := ts[1].Recv(ctx, 0); err != nil || string(m.Data) != "still here" {
		t.Fatalf("live pair after the loss: %q, %v", m.Data, err)
	} else {
		ts[1].Release(m)
	}
	// Rank 1's waits yield to rank 0 through the runtime, to the child's
	// rank 2 straight to the kernel.
	if local, linked := ts[1].PeerInProcess(0); !linked || !local {
		t.Errorf("rank 1's peer 0, in this process: linked %v, in process %v", linked, local)
	}
	if local, linked := ts[1].PeerInProcess(2); !linked || local {
		t.Errorf("rank 1's peer 2, the child: linked %v, in process %v", linked, local)
	}
	for _, name := range shmEntries(t) {
		if !slices.Contains(before, name) || strings.Contains(name, "gocoll") {
			t.Errorf("/dev/shm/%s left behind", name)
		}
	}
}

// TestAbortLooksLost checks that a linked peer's Abort is a loss, and
// its Close an orderly goodbye that is not. (A peer never linked learns
// of neither: see TestCloseUnlinked.)
func TestAbortLooksLost(t *testing.T) {
	ts := mesh(t, 3, shm.Options{LinkOptions: transport.LinkOptions{Eager: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts[2].Close()
	if _, err := ts[0].Recv(ctx, 2); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("recv from a closed peer: %v, want ErrPeerClosed", err)
	}
	select {
	case <-ts[0].Lost():
		t.Fatalf("an orderly close counted as a loss: %v", ts[0].LostErr())
	default:
	}
	ts[1].Abort(errors.New("checkpoint\nwrite failed"))
	if _, err := ts[0].Recv(ctx, 1); !errors.Is(err, transport.ErrPeerLost) || errors.Is(err, transport.ErrPeerClosed) ||
		!strings.Contains(err.Error(), "rank 1 gave up: checkpoint?write failed") {
		t.Fatalf("recv from an aborted peer: %v, want ErrPeerLost (not closed) carrying its reason", err)
	}
	select {
	case <-ts[0].Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("abort not reported through Lost")
	}
}

// TestCloseWakesPending checks that Close wakes a parked call with
// ErrClosed and that calls after Close fail the same way.
func TestCloseWakesPending(t *testing.T) {
	ts := mesh(t, 2, shm.Options{LinkOptions: transport.LinkOptions{Spin: -1}})
	done := make(chan error, 1)
	go func() {
		_, err := ts[0].Recv(context.Background(), 1)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ts[0].Close()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("pending recv woke with %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake a pending recv")
	}
	if err := ts[0].Send(context.Background(), 1, nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

// TestHeldMessageSurvivesAbort holds a received message across an Abort
// (as a collective reducing from a slot does when the watchdog aborts) and
// reads it afterwards: the ring must stay mapped until Release.
func TestHeldMessageSurvivesAbort(t *testing.T) {
	ts := mesh(t, 2, shm.Options{})
	ctx := context.Background()
	payload := []byte("still mapped")
	if err := ts[1].Send(ctx, 0, payload); err != nil {
		t.Fatal(err)
	}
	m, err := ts[0].Recv(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ts[0].Abort(nil)
	if string(m.Data) != string(payload) {
		t.Fatalf("held message reads %q after abort", m.Data)
	}
	ts[0].Release(m)
}

func TestBadOptions(t *testing.T) {
	for _, o := range []shm.Options{{LinkOptions: transport.LinkOptions{Slots: 1}}, {LinkOptions: transport.LinkOptions{SlotSize: 100}}, {LinkOptions: transport.LinkOptions{SlotSize: 1 << 30}}, {LinkOptions: transport.LinkOptions{Slots: 1 << 20}}} {
		if _, err := shm.Connect(context.Background(), nil, 0, 2, nil, o); err == nil || !strings.Contains(err.Error(), "shm:") {
			t.Errorf("options %+v: got %v, want an error", o, err)
		}
	}
	if _, err := shm.Connect(context.Background(), nil, 2, 2, nil, shm.Options{}); err == nil {
		t.Error("rank 2 of 2 accepted")
	}
}
