package blame

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
)

// jobRanks numbers a sub-communicator's ranks in the job, as a
// collectives.Channel does: rank r is job rank jobRanks[r].
type jobRanks []int

func (j jobRanks) Size() int         { return len(j) }
func (j jobRanks) JobRank(r int) int { return j[r] }

// TestNames: how the job's communicator and a sub-communicator name
// their ranks in errors.
func TestNames(t *testing.T) {
	job := Names{Rank: 1, Size: 4}
	sub := Names{Comm: "split #1 color 1", Rank: 1, Size: 3, Members: jobRanks{4, 5, 6}}
	cases := []struct{ got, want string }{
		{job.Prefix(), "comm: rank 1"},
		{job.WhoIs(3), "rank 3"},
		{job.JobWho(2), "rank 2"},
		{sub.Prefix(), "comm: rank 1 (job rank 5) of split #1 color 1"},
		{sub.WhoIs(2), "rank 2 (job rank 6)"},
		{sub.JobWho(4), "rank 0 (job rank 4)"},
		{sub.JobWho(9), "job rank 9"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if r := sub.FromJob(6); r != 2 {
		t.Errorf("sub.FromJob(6) = %d, want 2", r)
	}
	if r := sub.FromJob(1); r != -1 {
		t.Errorf("sub.FromJob(1) = %d, want -1 (no member)", r)
	}
	if r := job.FromJob(5); r != -1 {
		t.Errorf("job.FromJob(5) = %d, want -1 (a replacement past the job's size)", r)
	}
	if j := sub.JobRank(7); j != 7 {
		t.Errorf("sub.JobRank(7) = %d, want 7 (out of range: as given)", j)
	}
}

// TestCall: the CallError a chain becomes, its culprit in both
// numberings, and the sentinels errors.Is finds in it.
func TestCall(t *testing.T) {
	call := "allreduce #3 (algo ring, 4 x float32, sum)"
	killed := []bootstrap.Departure{{Rank: 6, Why: "killed by signal SIGKILL"}}
	lost := fmt.Errorf("%s: recv from rank 0: %w", call, transport.ErrPeerLost)
	cases := []struct {
		name            string
		n               Names
		err             error
		text            string // the whole Error
		culprit, jobCul int
		is              []error
	}{
		{"departure on the job's communicator", Names{Rank: 1, Size: 8}, Departed{lost, killed},
			"comm: rank 1: " + call + ": rank 6 killed by signal SIGKILL", 6, 6, []error{transport.ErrPeerLost}},
		{"departure on a sub-communicator", Names{Comm: "split #1 color 1", Rank: 1, Size: 3, Members: jobRanks{4, 5, 6}}, Departed{lost, killed},
			"comm: rank 1 (job rank 5) of split #1 color 1: " + call + ": rank 2 (job rank 6) killed by signal SIGKILL", 2, 6, []error{transport.ErrPeerLost}},
		{"a peer that timed out", Names{Rank: 0, Size: 4},
			fmt.Errorf("%s: recv from rank 2: peer lost: rank 2 gave up: comm: rank 2: %s: timed out: rank 3 never reached it: %w", call, call, transport.ErrPeerLost),
			"comm: rank 0: " + call + ": rank 2 gave up: timed out: rank 3 never reached it", 3, 3, []error{transport.ErrPeerLost, sentinel.Timeout}},
		{"this rank's context", Names{Rank: 2, Size: 4}, fmt.Errorf("%s: %w", call, context.Canceled),
			"comm: rank 2: " + call + ": context canceled", 2, 2, []error{context.Canceled}},
		{"a mismatch", Names{Rank: 0, Size: 2}, fmt.Errorf("%s: rank 1 called barrier #3 (algo dissemination): %w", call, collectives.ErrMismatch),
			"comm: rank 0: " + call + ": rank 1 called barrier #3 (algo dissemination): collective mismatch between ranks", 1, 1, []error{collectives.ErrMismatch}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Call(tc.n, "allreduce", true, func() []byte { return nil }, tc.err)
			var ce *CallError
			if !errors.As(err, &ce) {
				t.Fatalf("%v is no CallError", err)
			}
			if err.Error() != tc.text || ce.Culprit != tc.culprit || ce.JobCulprit != tc.jobCul {
				t.Errorf("got  %s (culprit %d, job rank %d)\nwant %s (culprit %d, job rank %d)", err, ce.Culprit, ce.JobCulprit, tc.text, tc.culprit, tc.jobCul)
			}
			for _, s := range tc.is {
				if !errors.Is(err, s) {
					t.Errorf("%v is not %v", err, s)
				}
			}
			if ce.Err.Error() != tc.err.Error() || strings.Contains(ce.Cause, "\n") {
				t.Errorf("Err %v does not hold the chain, or the cause is not one line", ce.Err)
			}
		})
	}
}
