package blame

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
)

// TestRootCause reduces chains that ranks really printed (some from
// before the one-line errors, when each rank quoted the whole story of
// the rank it lost) to the root cause and the rank at it.
func TestRootCause(t *testing.T) {
	cases := []struct {
		name, text, cause string
		culprit           int
	}{
		{
			"timeout, lost through two ranks",
			"broadcast #5 (algo binomial, 1000 x int32, root 0): recv from rank 0: peer lost: rank 0 gave up: link to rank 1: peer lost: rank 1 gave up: timed out: a collective ran longer than 8s (GOCOLL_TIMEOUT) while its context had no deadline: context deadline exceeded (the rendezvous saw rank 1 give up: timed out: a collective ran longer than 8s (GOCOLL_TIMEOUT) while its context had no deadline: context deadline exceeded first, then 2 more)",
			"rank 1 gave up: timed out: a collective ran longer than 8s (GOCOLL_TIMEOUT) while its context had no deadline: context deadline exceeded", 1,
		},
		{
			"cancel, quoted twice",
			"allreduce #4 (algo ring, 140000 x int32, min): send to rank 1: peer lost: rank 1 gave up: allreduce #4 (algo ring, 140000 x int32, min): send to rank 2: peer lost: rank 2 gave up: allreduce #4 (algo ring, 140000 x int32, min): recv from rank 1: context canceled (the rendezvous saw rank 2 give up: allreduce #4 (algo ring, 140000 x int32, min): recv from rank 1: context canceled first, then 1 more)",
			"rank 2 gave up: recv from rank 1: context canceled", 2,
		},
		{
			"one-line goodbyes",
			"allreduce #4 (algo ring, 8 x int32, min): recv from rank 3: peer lost: rank 3 gave up: comm: rank 3: allreduce #4 (algo ring, 8 x int32, min): rank 2 gave up: comm: rank 2: allreduce #4 (algo ring, 8 x int32, min): recv from rank 1: context canceled",
			"rank 2 gave up: recv from rank 1: context canceled", 2,
		},
		{
			"timed out naming the absent rank",
			"timed out; rank 2 never reached call #4: allreduce #4 (algo ring, 140000 x int32, min): recv from rank 3: context deadline exceeded",
			"timed out; rank 2 never reached call #4: recv from rank 3: context deadline exceeded", 2,
		},
		{
			"lost a rank that timed out",
			"allreduce #4 (algo ring, 8 x int32, min): recv from rank 0: peer lost: rank 0 gave up: comm: rank 0: allreduce #4 (algo ring, 8 x int32, min): timed out; ranks 2, 3 never reached call #4: recv from rank 3: context deadline exceeded",
			"rank 0 gave up: timed out; ranks 2, 3 never reached call #4: recv from rank 3: context deadline exceeded", 2,
		},
		{
			"mismatch found here",
			"this rank called gather #4 (algo linear, 9 x int32, root 2), rank 3 called gather #4 (algo linear, 9 x int32, root 1): collective mismatch between ranks",
			"rank 3 called gather #4 (algo linear, 9 x int32, root 1): collective mismatch between ranks", 3,
		},
		{
			"sub-communicator record",
			"allreduce #1 (algo rd, 1000 x int32, sum): rank 2 (job rank 5) left the communicator: communicator aborted: shutting down: peer lost",
			"rank 2 (job rank 5) left the communicator: communicator aborted: shutting down", 2,
		},
		{
			"gave up because another died",
			"broadcast #1025 (algo chain, 400000 x float32, root 2): recv from rank 0: peer lost: rank 0 gave up: comm: rank 0: broadcast #1025 (algo chain, 400000 x float32, root 2): rank 1 died (its rendezvous connection closed without goodbye) (rendezvous unreachable too: bootstrap: put \"calls/0/2\": rendezvous store closed)",
			"rank 1 died (its rendezvous connection closed without goodbye)", 1,
		},
		{
			// The link's rank is read from its error, not its text
			// (TestLinkFromTransports).
			"a link, nothing else known",
			"allreduce #9 (algo ring, 8 x float32, sum): recv from rank 3: peer lost: connection closed without goodbye (process died?)",
			"recv from rank 3: peer lost: connection closed without goodbye (process died?)", -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cause, culprit := rootCause(tc.text)
			if cause != tc.cause || culprit != tc.culprit {
				t.Errorf("rootCause =\n  %q, %d\nwant\n  %q, %d", cause, culprit, tc.cause, tc.culprit)
			}
		})
	}
}

// TestOddOneOut: a rank that found its call mismatched gives up naming
// what the other rank called; a bystander whose call is that one blames
// the rank that gave up (seen over RDMA in the VM: rank 6 blamed rank 0,
// which made the same call as it, for rank 1's barrier).
func TestOddOneOut(t *testing.T) {
	const alltoall = "alltoall #5 (algo pairwise, 1 x float32)"
	cases := []struct {
		name, text, mine string
		rank             int
		call             string
		local            bool
	}{
		{"bystander in the others' call",
			"alltoall #5 (algo pairwise, 1 x float32): recv from rank 1: peer lost: rank 1 gave up: comm: rank 1: barrier #5 (algo dissemination): rank 0 called alltoall #5 (algo pairwise, 1 x float32): collective mismatch between ranks",
			alltoall, 1, "barrier #5 (algo dissemination)", false},
		{"sub-communicator goodbye",
			"allreduce #9 (algo hier, 1000 x int64, sum): recv from rank 7: peer lost: rank 7 gave up: comm: rank 3 (job rank 7) of split #1 color 0: allreduce #9 (algo hier, 1001 x int64, sum): rank 2 (job rank 6) called allreduce #9 (algo hier, 1000 x int64, sum): collective mismatch between ranks",
			"allreduce #9 (algo hier, 1000 x int64, sum)", 7, "allreduce #9 (algo hier, 1001 x int64, sum)", false},
		{"bystander in the odd call: no verdict",
			"barrier #5 (algo dissemination): recv from rank 1: peer lost: rank 1 gave up: comm: rank 1: barrier #5 (algo dissemination): rank 0 called alltoall #5 (algo pairwise, 1 x float32): collective mismatch between ranks",
			"barrier #5 (algo dissemination)", -1, "", false},
		{"a third call: no verdict",
			"gather #5 (algo linear, 3 x int32, root 0): recv from rank 1: peer lost: rank 1 gave up: comm: rank 1: barrier #5 (algo dissemination): rank 0 called alltoall #5 (algo pairwise, 1 x float32): collective mismatch between ranks",
			"gather #5 (algo linear, 3 x int32, root 0)", -1, "", false},
		{"no mismatch goodbye",
			"allreduce #9 (algo ring, 8 x float32, sum): recv from rank 3: peer lost: connection closed without goodbye (process died?)",
			"allreduce #9 (algo ring, 8 x float32, sum)", -1, "", false},
		{"bystander not yet in the others' call",
			"rank 4 gave up: comm: rank 4: barrier #1 (algo dissemination): rank 0 called allgather #1 (algo ring, 70000 x float64): collective mismatch between ranks",
			"allgather #1 (not started)", 4, "barrier #1 (algo dissemination)", false},
		{"bystander not yet in the odd call: no verdict",
			"rank 4 gave up: comm: rank 4: barrier #1 (algo dissemination): rank 0 called allgather #1 (algo ring, 70000 x float64): collective mismatch between ranks",
			"barrier #1 (not started)", -1, "", false},
		{"the finder's record, finder innocent",
			"alltoall #5 (algo pairwise, 1 x float32): rank 0 called alltoall #5 (algo pairwise, 1 x float32), rank 1 called barrier #5 (algo dissemination): collective mismatch between ranks",
			alltoall, 1, "barrier #5 (algo dissemination)", true},
		{"the finder's record, finder the odd one",
			"alltoall #5 (algo pairwise, 1 x float32): rank 1 called barrier #5 (algo dissemination), rank 0 called alltoall #5 (algo pairwise, 1 x float32): collective mismatch between ranks",
			alltoall, 1, "barrier #5 (algo dissemination)", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rank, call, local, ok := oddOneOut(tc.text, tc.mine)
			if rank != tc.rank || call != tc.call || local != tc.local || ok != (tc.rank >= 0) {
				t.Errorf("oddOneOut = %d, %q, %v, %v; want %d, %q, %v", rank, call, local, ok, tc.rank, tc.call, tc.local)
			}
		})
	}
}

// TestInitLoss: an Init whose agreement lost a peer through a relay of
// goodbyes names the rank the store saw leave first, in one line (the
// text CI's job shapes printed, 8 ranks, rank 2 calling barrier where
// the others called allgather), and keeps the chain behind it.
func TestInitLoss(t *testing.T) {
	relay := "allreduce #1 (algo rd, 1 x uint64, min): send to rank 5: peer lost: rank 5 gave up: peer lost: rank 3 gave up: comm: rank 3: allgather #2 (algo ring, 7 x float64): rank 2 called barrier #2 (algo dissemination): collective mismatch between ranks"
	ds := []bootstrap.Departure{
		{Rank: 3, Why: "give up: comm: rank 3: allgather #2 (algo ring, 7 x float64): rank 2 called barrier #2 (algo dissemination): collective mismatch between ranks"},
		{Rank: 1, Why: "give up: an earlier goodbye of this very rank"},
		{Rank: 5, Why: "give up: peer lost: rank 3 gave up: ..."},
	}
	chain := Departed{fmt.Errorf("%w: %s", transport.ErrPeerLost, relay), ds}
	n := Names{Rank: 1, Size: 8}
	err := InitLoss(n, chain)
	want := "peer lost: rank 3 gave up: comm: rank 3: allgather #2 (algo ring, 7 x float64): rank 2 called barrier #2 (algo dissemination): collective mismatch between ranks, then 1 more"
	if err.Error() != want {
		t.Errorf("InitLoss:\n got %s\nwant %s", err, want)
	}
	var d Departed
	if !errors.Is(err, transport.ErrPeerLost) || !errors.Is(err, bootstrap.ErrRankGone) || !errors.As(err, &d) || len(d.Departures) != 3 {
		t.Errorf("InitLoss: %v is not ErrPeerLost and ErrRankGone with the departures behind it", err)
	}
	// Only this rank left (its own goodbye), or nobody: nothing to name.
	alone := Departed{fmt.Errorf("%w: %s", transport.ErrPeerLost, relay), ds[1:2]}
	if got := InitLoss(n, alone); got.Error() != alone.Error() {
		t.Errorf("InitLoss with only this rank gone: %v, want the error as it was", got)
	}
	plain := fmt.Errorf("%w: dial refused", transport.ErrPeerLost)
	if got := InitLoss(n, plain); got != plain {
		t.Errorf("InitLoss without departures: %v, want the error as it was", got)
	}
}

// jobOrder numbers a sub-communicator's ranks in the job: rank r is job
// rank r*2+1.
type jobOrder int

func (m jobOrder) Size() int         { return int(m) }
func (m jobOrder) JobRank(r int) int { return 2*r + 1 }

// A link that failed to connect names the peer as the transport numbers
// it, in the job: the culprit is said as every member would say it.
func TestConnectLoss(t *testing.T) {
	n := Names{Comm: "split #1 color 1", Rank: 0, Size: 4, Members: jobOrder(4)}
	for _, tc := range []struct {
		op            string
		peer, culprit int
		want          string
	}{
		{"connect to", 7, 3, "(job rank 7) was lost: connection reset by peer"},
		{"link to", 5, 2, "(job rank 5) was lost: connection reset by peer"},
		{"connect to", 4, -1, "job rank 4 was lost: connection reset by peer"},
	} {
		// As a transport's loss record has it (internal/mesh.Loss).
		err := &transport.PeerError{Peer: tc.peer, Op: tc.op, Err: fmt.Errorf("%w: connection reset by peer", transport.ErrPeerLost)}
		ce := P2P(n, "recv from rank 3 tag 1", err)
		if ce.Culprit != tc.culprit || !strings.HasSuffix(ce.Error(), tc.want) {
			t.Errorf("%v: culprit %d, %q; want culprit %d, ending %q", err, ce.Culprit, ce.Error(), tc.culprit, tc.want)
		}
	}
}
