package blame

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// connector builds rank r of a job of n ranks over a real transport.
type connector func(ctx context.Context, store *bootstrap.Client, r, n int, token []byte) (transport.Transport, error)

// job connects n in-process ranks through a real rendezvous store, each
// with a Mux over its transport, as Init does.
func job(t *testing.T, n int, connect connector) ([]transport.Transport, []*collectives.Mux) {
	t.Helper()
	token := []byte("blame-link-token")
	ts := conformance.Job(t, n, token, func(ctx context.Context, store *bootstrap.Client, r int) (transport.Transport, error) {
		return connect(ctx, store, r, n, token)
	})
	ms := make([]*collectives.Mux, n)
	for r, tr := range ts {
		ms[r] = collectives.NewMux(tr, 0)
	}
	return ts, ms
}

// TestLinkFromTransports: the culprit of a failure seen only on a link is
// read from the error chain the transports and the mux really return
// (the *transport.PeerError, and inside a channel's the
// collectives.JobRankError with the peer's job rank), for the call that
// failed on a sub-communicator whose numbering differs from the job's and
// for the transport's own record of a link it could not make. Job ranks
// 0 and 2 form "split #1 color 0", where job rank 2 is rank 1; job rank 2
// leaves after a call, then job rank 1, which job rank 0 never linked to.
func TestLinkFromTransports(t *testing.T) {
	transports := []struct {
		name    string
		connect connector
	}{
		{"tcp", func(ctx context.Context, s *bootstrap.Client, r, n int, token []byte) (transport.Transport, error) {
			tr, err := tcp.Connect(ctx, s, r, n, token, tcp.Options{LinkOptions: transport.LinkOptions{Crowded: true}})
			if err != nil {
				return nil, err
			}
			return tr, nil
		}},
		{"shm", func(ctx context.Context, s *bootstrap.Client, r, n int, token []byte) (transport.Transport, error) {
			tr, err := shm.Connect(ctx, s, r, n, token, shm.Options{LinkOptions: transport.LinkOptions{Crowded: true}})
			if err != nil {
				return nil, err
			}
			return tr, nil
		}},
	}
	split := []int{0, 2}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			ts, ms := job(t, 3, tr.connect)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			chs := make([]*collectives.Channel, 3)
			for _, j := range split {
				ch, err := ms[j].Channel(1, split)
				if err != nil {
					t.Fatal(err)
				}
				chs[j] = ch
			}
			// One call that works, so that the link is up, then job rank
			// 2 leaves and job rank 0's next call fails on that link.
			g0 := collectives.NewGroup(chs[0], collectives.Options{})
			g2 := collectives.NewGroup(chs[2], collectives.Options{})
			buf0, buf2 := make([]byte, 64), make([]byte, 64)
			done := make(chan error, 1)
			go func() { done <- g2.AllReduce(ctx, buf2, reduce.Int32, reduce.Sum) }()
			if err := g0.AllReduce(ctx, buf0, reduce.Int32, reduce.Sum); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ts[2].Close()
			callErr := g0.AllReduce(ctx, buf0, reduce.Int32, reduce.Sum)
			if !errors.Is(callErr, transport.ErrPeerLost) {
				t.Fatalf("the call after job rank 2 left: %v, want ErrPeerLost", callErr)
			}
			// Job rank 1, never linked to, leaves too: the link job rank 0
			// then tries to make fails, and the transport records the loss.
			ts[1].Close()
			all, err := ms[0].Channel(0, []int{0, 1, 2})
			if err != nil {
				t.Fatal(err)
			}
			if err := all.Send(ctx, 1, []byte("hello")); !errors.Is(err, transport.ErrPeerLost) {
				t.Fatalf("a send to job rank 1 after it left: %v, want ErrPeerLost", err)
			}
			var recorded error
			select {
			case <-ts[0].(transport.LossNotifier).Lost():
				recorded = ts[0].(transport.LossNotifier).LostErr()
			case <-ctx.Done():
				t.Fatal("the transport never recorded the loss")
			}
			splitNames := Names{Comm: "split #1 color 0", Rank: 0, Size: 2, Members: chs[0]}
			jobNames := Names{Rank: 0, Size: 3}
			cases := []struct {
				name          string
				n             Names
				err           error
				culprit, jobC int
				who           string
			}{
				{"the call, renumbered by the mux", splitNames, callErr, 1, 2, "rank 1 (job rank 2) was lost: "},
				{"the transport's record, on the job's", jobNames, recorded, 1, 1, "rank 1 was lost: "},
				{"the transport's record, on a sub-communicator without the rank", splitNames, recorded, -1, 1, "job rank 1 was lost: "},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if tc.err == nil {
						t.Fatal("no error to read")
					}
					var ce *CallError
					if !errors.As(Call(tc.n, "allreduce", true, g0.Recent, tc.err), &ce) {
						t.Fatal("Call returned no CallError")
					}
					t.Logf("%q: %s", tc.err, ce.Cause)
					if ce.Culprit != tc.culprit || ce.JobCulprit != tc.jobC || !strings.HasPrefix(ce.Cause, tc.who) ||
						strings.Contains(ce.Cause, ": job rank ") || !errors.Is(ce, transport.ErrPeerLost) {
						t.Errorf("chain %q:\n got culprit %d (job %d), cause %q\nwant culprit %d (job %d), cause starting %q, ErrPeerLost",
							tc.err, ce.Culprit, ce.JobCulprit, ce.Cause, tc.culprit, tc.jobC, tc.who)
					}
				})
			}
		})
	}
}

// TestLinkWordsDoNotMatter: blame reads the link's peer from the errors'
// fields, so a link whose words no earlier version knew (another
// operation, another cause, another transport's phrasing) still names its
// peer, in the numbering of the communicator that failed.
func TestLinkWordsDoNotMatter(t *testing.T) {
	n := Names{Comm: "split #1 color 1", Rank: 0, Size: 4, Members: jobOrder(4)}
	lost := func(text string) error { return fmt.Errorf("%w: %s", transport.ErrPeerLost, text) }
	cases := []struct {
		name          string
		err           error
		culprit, jobC int
		cause         string
	}{
		{"a transport's link, an operation of new words",
			&transport.PeerError{Peer: 5, Op: "queue pair to", Err: lost("retry count exceeded")},
			2, 5, "rank 2 (job rank 5) was lost: retry count exceeded"},
		{"a channel's link, its job rank in a field",
			&transport.PeerError{Peer: 3, Op: "pull from", Err: &collectives.JobRankError{Rank: 7, Renumbered: true, Err: lost("the ring went quiet")}},
			3, 7, "rank 3 (job rank 7) was lost: the ring went quiet"},
		{"a job rank outside the communicator",
			&transport.PeerError{Peer: 6, Op: "hello to", Err: lost("stream reset")},
			-1, 6, "job rank 6 was lost: stream reset"},
		{"wrapped by the call and a note",
			fmt.Errorf("allreduce #2 (algo ring, 8 x int32, sum): %w (also lost: rank 9: it hung up)",
				&transport.PeerError{Peer: 1, Op: "fetch from", Err: lost("gone")}),
			0, 1, "rank 0 (job rank 1) was lost: gone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ce *CallError
			if !errors.As(Call(n, "allreduce", true, func() []byte { return nil }, tc.err), &ce) {
				t.Fatal("Call returned no CallError")
			}
			if ce.Culprit != tc.culprit || ce.JobCulprit != tc.jobC || ce.Cause != tc.cause {
				t.Errorf("%q:\n got culprit %d (job %d), %q\nwant culprit %d (job %d), %q", tc.err, ce.Culprit, ce.JobCulprit, ce.Cause, tc.culprit, tc.jobC, tc.cause)
			}
		})
	}
}
