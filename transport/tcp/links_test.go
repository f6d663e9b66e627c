package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// job connects the ranks listed in present of a job of n over loopback,
// through a store the test holds (so that it can say a rank died), and
// returns their transports, nil for the absent ones.
func job(t *testing.T, n int, present []int, opts func(r int) tcp.Options) ([]*tcp.Transport, *bootstrap.Server) {
	t.Helper()
	token := []byte("links-test-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]*tcp.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, r := range present {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { store.Close() })
			if err := store.Join(ctx, r, n, ""); err != nil {
				errs[r] = err
				return
			}
			o := opts(r)
			o.Crowded = n > runtime.NumCPU()
			ts[r], errs[r] = tcp.Connect(ctx, store, r, n, token, o)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func() { defer wg.Done(); tr.Close() }()
			}
		}
		wg.Wait()
		srv.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts, srv
}

func all(n int) []int {
	rs := make([]int, n)
	for i := range rs {
		rs[i] = i
	}
	return rs
}

// exchange has every rank of ts send one message to each peer in
// pairs(rank), all at once, and receive one from each; it checks the
// payloads.
func exchange(t *testing.T, ctx context.Context, ts []*tcp.Transport, pairs func(r int) []int) {
	t.Helper()
	var wg sync.WaitGroup
	errc := make(chan error, 4*len(ts)*len(ts))
	for r, tr := range ts {
		for _, p := range pairs(r) {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := tr.Send(ctx, p, []byte(fmt.Sprintf("%d->%d", r, p))); err != nil {
					errc <- err
				}
			}()
			go func() {
				defer wg.Done()
				m, err := tr.Recv(ctx, p)
				if err != nil {
					errc <- err
					return
				}
				if want := fmt.Sprintf("%d->%d", p, r); string(m.Data) != want {
					errc <- fmt.Errorf("rank %d got %q from %d, want %q", r, m.Data, p, want)
				}
				tr.Release(m)
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestLinksOnDemand: a rank holds links to the peers it talked to and no
// others, whichever end needed the link first and however many needed
// it at once, with one connection per pair; Eager and Warm make them at
// Connect.
func TestLinksOnDemand(t *testing.T) {
	const n = 8
	ring := func(r int) []int { return []int{(r + 1) % n, (r + n - 1) % n} }
	allPeers := func(r int) []int {
		var ps []int
		for p := range n {
			if p != r {
				ps = append(ps, p)
			}
		}
		return ps
	}
	none := func(int) []int { return nil }
	cases := []struct {
		name      string
		opts      func(r int) tcp.Options
		atConnect int // links each rank holds after Connect
		talk      func(r int) []int
		after     int // links each rank holds after talking
	}{
		{"lazy ring", func(int) tcp.Options { return tcp.Options{} }, 0, ring, 2},
		{"lazy all pairs at once", func(int) tcp.Options { return tcp.Options{} }, 0, allPeers, n - 1},
		{"eager", func(int) tcp.Options { return tcp.Options{LinkOptions: transport.LinkOptions{Eager: true}} }, n - 1, ring, n - 1},
		{"warm ring", func(r int) tcp.Options { return tcp.Options{Warm: ring(r)} }, 2, ring, 2},
		{"warm, then nothing", func(r int) tcp.Options { return tcp.Options{Warm: ring(r)} }, 2, none, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := job(t, n, all(n), tc.opts)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Connect returns once this rank's end of each link it
			// makes there is up.
			for r, tr := range ts {
				if got := tr.Links(); got != tc.atConnect {
					t.Errorf("rank %d: %d links after Connect, want %d", r, got, tc.atConnect)
				}
			}
			exchange(t, ctx, ts, tc.talk)
			for r, tr := range ts {
				if got := tr.Links(); got != tc.after {
					t.Errorf("rank %d: %d links, want %d", r, got, tc.after)
				}
				if got := tr.AddressLookups(); got > tc.after {
					t.Errorf("rank %d: %d addresses fetched for %d links", r, got, tc.after)
				}
			}
		})
	}
}

// TestFirstContactOrder: a rank's first Send to a peer that is busy
// waiting on a third rank must not wait for that peer to dial: rank 0
// sends to 1 and then to 2, rank 1 receives from 2 before 0, rank 2
// receives from 0 before it sends to 1. Links made only by the higher
// rank, or only by receivers, would deadlock here.
func TestFirstContactOrder(t *testing.T) {
	ts, _ := job(t, 3, all(3), func(int) tcp.Options { return tcp.Options{} })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	recv := func(tr *tcp.Transport, from int, want string) error {
		m, err := tr.Recv(ctx, from)
		if err != nil {
			return err
		}
		defer tr.Release(m)
		if !bytes.Equal(m.Data, []byte(want)) {
			return fmt.Errorf("got %q from %d, want %q", m.Data, from, want)
		}
		return nil
	}
	steps := []func() error{
		func() error {
			if err := ts[0].Send(ctx, 1, []byte("a")); err != nil {
				return err
			}
			return ts[0].Send(ctx, 2, []byte("b"))
		},
		func() error {
			if err := recv(ts[1], 2, "c"); err != nil {
				return err
			}
			return recv(ts[1], 0, "a")
		},
		func() error {
			if err := recv(ts[2], 0, "b"); err != nil {
				return err
			}
			return ts[2].Send(ctx, 1, []byte("c"))
		},
	}
	for r, step := range steps {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = step() }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestUnlinkedPeerLost: a call waiting on a peer it has no link to fails
// promptly, naming that peer, when the peer turns out to be gone: its
// process died before it published its address (the store's departure
// ends the wait), or its transport is gone (the dial is refused). A peer
// that merely has not come yet is waited for until ctx ends.
func TestUnlinkedPeerLost(t *testing.T) {
	cases := []struct {
		name string
		// gone makes rank 2 gone, given the store and rank 2's
		// transport (nil if it never connected).
		present []int
		gone    func(srv *bootstrap.Server, t2 *tcp.Transport)
		wait    time.Duration
		want    error
		// lost: Lost must close. A peer that closed in good order is
		// lost only if the dial found it closed, not if it said goodbye
		// on a link made just before.
		lost bool
	}{
		{"died before it connected", []int{0, 1}, func(srv *bootstrap.Server, _ *tcp.Transport) {
			srv.MarkGone(2, "killed by signal SIGKILL")
		}, 10 * time.Second, transport.ErrPeerLost, true},
		{"aborted", []int{0, 1, 2}, func(_ *bootstrap.Server, t2 *tcp.Transport) {
			t2.Abort(errors.New("gave up"))
		}, 10 * time.Second, transport.ErrPeerLost, true},
		{"closed", []int{0, 1, 2}, func(_ *bootstrap.Server, t2 *tcp.Transport) {
			go t2.Close() // which lingers for the peers' goodbyes
		}, 10 * time.Second, transport.ErrPeerLost, false},
		{"not there yet", []int{0, 1}, func(*bootstrap.Server, *tcp.Transport) {}, 300 * time.Millisecond, context.DeadlineExceeded, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, srv := job(t, 3, tc.present, func(int) tcp.Options { return tcp.Options{} })
			ctx, cancel := context.WithTimeout(context.Background(), tc.wait)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := ts[0].Recv(ctx, 2)
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			tc.gone(srv, ts[2])
			err := <-done
			var pe *transport.PeerError
			if !errors.Is(err, tc.want) || !errors.As(err, &pe) || pe.Peer != 2 {
				t.Fatalf("Recv from rank 2: %v, want %v naming rank 2", err, tc.want)
			}
			if tc.want == transport.ErrPeerLost {
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("the loss took %v to notice, want at once", took)
				}
				if tc.lost {
					select {
					case <-ts[0].Lost():
					default:
						t.Error("Lost not closed after the loss")
					}
					if err := ts[0].LostErr(); !errors.Is(err, transport.ErrPeerLost) {
						t.Errorf("LostErr = %v, want ErrPeerLost", err)
					}
				}
				// Later calls fail alike, at once.
				if err := ts[0].Send(context.Background(), 2, []byte("x")); !errors.Is(err, transport.ErrPeerLost) {
					t.Errorf("a later Send: %v, want ErrPeerLost", err)
				}
			}
			// The other peers are unaffected.
			exchange(t, context.Background(), ts[:2], func(r int) []int { return []int{1 - r} })
		})
	}
}

// TestEagerConnectNeedsEveryone: an eager Connect fails when a rank never
// comes, once ctx ends, and when the store says a rank died, at once.
func TestEagerConnectNeedsEveryone(t *testing.T) {
	token := []byte("links-test-token")
	for _, died := range []bool{false, true} {
		t.Run(fmt.Sprintf("died=%v", died), func(t *testing.T) {
			srv, err := bootstrap.Listen("127.0.0.1:0", token)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			if died {
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				time.AfterFunc(100*time.Millisecond, func() { srv.MarkGone(0, "killed by signal SIGKILL") })
			}
			defer cancel()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			start := time.Now()
			_, err = tcp.Connect(ctx, store, 1, 2, token, tcp.Options{LinkOptions: transport.LinkOptions{Eager: true}})
			want := context.DeadlineExceeded
			if died {
				want = bootstrap.ErrRankGone
			}
			if !errors.Is(err, want) {
				t.Fatalf("Connect without rank 0: %v, want %v", err, want)
			}
			if died && time.Since(start) > 2*time.Second {
				t.Errorf("took %v to notice rank 0 died", time.Since(start))
			}
		})
	}
}

// BenchmarkFirstContact is what one link costs: the first message
// between two ranks that have none, which fetches the address, dials,
// authenticates both ends and allocates the slabs. docs/scale.md uses it.
//
//	go test -run '^$' -bench FirstContact ./transport/tcp
func BenchmarkFirstContact(b *testing.B) {
	token := []byte("links-bench-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	stores := make([]*bootstrap.Client, 2)
	for r := range stores {
		if stores[r], err = bootstrap.Dial(ctx, srv.Addr(), token); err != nil {
			b.Fatal(err)
		}
		defer stores[r].Close()
	}
	var linking time.Duration
	for i := 0; i < b.N; i++ {
		// A namespace per pair keeps the pairs apart in the one store.
		ts := make([]*tcp.Transport, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range ts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ts[r], errs[r] = tcp.Connect(ctx, stores[r], r, 2, token, tcp.Options{LinkOptions: transport.LinkOptions{Namespace: fmt.Sprintf("b%d/", i)}})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[0] = ts[0].Send(ctx, 1, []byte("x"))
		}()
		m, err := ts[1].Recv(ctx, 0)
		wg.Wait()
		linking += time.Since(start)
		if err != nil || errs[0] != nil {
			b.Fatal(err, errs[0])
		}
		ts[1].Release(m)
		for _, tr := range ts {
			wg.Add(1)
			go func() { defer wg.Done(); tr.Abort(nil) }()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(linking.Nanoseconds())/float64(b.N), "ns/link")
}

// BenchmarkStoreRequest is one request to the rendezvous store and its
// answer, on loopback: the unit of the rendezvous's cost in docs/scale.md.
//
//	go test -run '^$' -bench StoreRequest ./transport/tcp
func BenchmarkStoreRequest(b *testing.B) {
	token := []byte("links-bench-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c, err := bootstrap.Dial(ctx, srv.Addr(), token)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, "k", []byte("127.0.0.1:12345")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Get(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}
