package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	envset "github.com/gocoll/gocoll/internal/settings"
)

// connectAll runs Connect for every rank of a job of n ranks, each on a
// store connection of its own to a store on the loopback interface, as
// Init's ranks do. It returns each rank's result and error; the caller
// closes the transports.
func connectAll(t *testing.T, n int, o Options) ([]Wired, []error) {
	t.Helper()
	ws, errs, _ := connectJob(t, n, o, []byte("wiring-test"))
	return ws, errs
}

// connectJob is connectAll for a job with token (none: nil), and says
// where its store is.
func connectJob(t *testing.T, n int, o Options, token []byte) ([]Wired, []error, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ws := make([]Wired, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := bootstrap.Config{Rank: r, Size: n, Addr: srv.Addr(), Token: token}
			store, err := bootstrap.Dial(ctx, cfg.Addr, token)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { store.Close() })
			if errs[r] = store.Join(ctx, r, n, ""); errs[r] != nil {
				return
			}
			ws[r], errs[r] = Connect(ctx, store, cfg, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		// At once, as the ranks of a job close: each waits a moment for
		// its peers' goodbyes.
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w.Transport != nil {
					w.Transport.Close()
				}
				if w.LinkStore != nil {
					w.LinkStore.Close()
				}
			}()
		}
		wg.Wait()
	})
	return ws, errs, srv.Addr()
}

// TestConnect: the transport each layout of ranks gets, the hosts every
// rank is told, and that what was built carries a message from every
// rank to the next.
func TestConnect(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		o     Options
		want  string
		hosts []int
		spare int
		links bool // the network transports' own store connection
	}{
		{"auto, one host", 3, Options{Transport: "auto"}, "shm", []int{0, 0, 0}, 0, false},
		{"auto, a host per rank", 3, Options{Transport: "auto", FakeHosts: 3}, "tcp", []int{0, 1, 2}, 0, true},
		{"auto, two hosts of two", 4, Options{Transport: "auto", FakeHosts: 2}, "shm+tcp", []int{0, 0, 1, 1}, 0, true},
		{"tcp forced", 2, Options{Transport: "tcp"}, "tcp", []int{0, 0}, 0, true},
		{"tcp, elastic", 2, Options{Transport: "tcp", Elastic: true}, "tcp", []int{0, 0}, GrowSpare(2), true},
		{"shm, elastic", 2, Options{Transport: "shm", Elastic: true}, "shm", []int{0, 0}, GrowSpare(2), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws, errs := connectAll(t, tc.n, tc.o)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, w := range ws {
				if w.Name != tc.want || !slices.Equal(w.Hosts, tc.hosts) || w.Spare != tc.spare || (w.LinkStore != nil) != tc.links {
					t.Errorf("rank %d: %s on hosts %v, spare %d, own store connection %v; want %s on %v, spare %d, %v",
						r, w.Name, w.Hosts, w.Spare, w.LinkStore != nil, tc.want, tc.hosts, tc.spare, tc.links)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			got := make([]error, tc.n)
			for r, w := range ws {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next, prev := (r+1)%tc.n, (r-1+tc.n)%tc.n
					if err := w.Transport.Send(ctx, next, []byte{byte(r)}); err != nil {
						got[r] = err
						return
					}
					m, err := w.Transport.Recv(ctx, prev)
					if err != nil {
						got[r] = err
						return
					}
					if len(m.Data) != 1 || m.Data[0] != byte(prev) {
						got[r] = errors.New("wrong message")
					}
					w.Transport.Release(m)
				}()
			}
			wg.Wait()
			for r, err := range got {
				if err != nil {
					t.Errorf("rank %d: ring message: %v", r, err)
				}
			}
		})
	}
}

// TestConnectRefused: settings the job's layout cannot have fail on every
// rank with ErrInvalid, and leave nothing open.
func TestConnectRefused(t *testing.T) {
	cases := []struct {
		name string
		n    int
		o    Options
	}{
		{"shm across hosts", 4, Options{Transport: "shm", FakeHosts: 2}},
		{"fake layout of the wrong size", 3, Options{Transport: "auto", FakeEnv: envFake(t, "1,1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws, errs := connectAll(t, tc.n, tc.o)
			for r, err := range errs {
				if !errors.Is(err, collectives.ErrInvalid) {
					t.Errorf("rank %d: err = %v, want ErrInvalid", r, err)
				}
				if ws[r].Transport != nil || ws[r].LinkStore != nil {
					t.Errorf("rank %d: failed, yet returned what it built", r)
				}
			}
		})
	}
}

// envFake is GOCOLL_FAKE_HOSTS=v as internal/settings parses it.
func envFake(t *testing.T, v string) envset.FakeHosts {
	t.Helper()
	env, err := envset.Read(func(name string) (string, bool) { return v, name == "GOCOLL_FAKE_HOSTS" })
	if err != nil {
		t.Fatal(err)
	}
	return env.FakeHosts
}

// TestFirstPartners: the partners GOCOLL_TCP_CONNECT=warm links at Init
// are a symmetric relation (both ends of each link want it at once),
// never the rank itself, and include the ring's neighbours.
func TestFirstPartners(t *testing.T) {
	for n := 1; n <= 13; n++ {
		sets := make([][]int, n)
		for r := range n {
			sets[r] = FirstPartners(r, n)
		}
		for r, ps := range sets {
			if slices.Contains(ps, r) {
				t.Errorf("n=%d: rank %d is its own partner: %v", n, r, ps)
			}
			if n > 1 && (!slices.Contains(ps, (r+1)%n) || !slices.Contains(ps, (r-1+n)%n)) {
				t.Errorf("n=%d: rank %d misses a ring neighbour: %v", n, r, ps)
			}
			for _, p := range ps {
				if p < 0 || p >= n || !slices.Contains(sets[p], r) {
					t.Errorf("n=%d: rank %d names %d, which does not name it back: %v, %v", n, r, p, ps, sets[p])
				}
			}
		}
	}
}
