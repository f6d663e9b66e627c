package comm

import (
	"errors"
	"fmt"

	"github.com/gocoll/gocoll/internal/blame"
)

// CallError is the error of a collective that failed part-way on a
// communicator of several ranks, and so broke it. Its Error is one line:
// the communicator and rank, the call, and the root cause, which is often
// on another rank:
//
//	comm: rank 0: allreduce #4 (algo ring, 1024 x int32, min): rank 2 gave up: recv from rank 1: context canceled
//	comm: rank 1 (job rank 5) of split #1 color 0: broadcast #3 (algo binomial, 10 x float32, root 0): rank 2 (job rank 6) killed by signal SIGKILL
//
// The whole story as this rank saw it (the link that failed here, what
// each rank that gave up said, what the rendezvous saw) is Err: errors.Is
// and errors.As see through to it, and GOCOLL_DEBUG=info logs it.
//
// Its fields:
//
//   - Comm names the communicator: empty for the job's, else how it was
//     made ("split #1 color 0"; nested splits are listed outermost
//     first). Its ranks are numbered from 0, and Errors name each rank
//     of it with its job rank too.
//   - Rank is this rank in Comm's numbering, JobRank in the job's.
//   - Call is the collective as the ranks numbered it ("allreduce #4
//     (algo ring, 1024 x int32, min)"), or its name if it failed before
//     it was numbered; for a point-to-point operation, what it was
//     ("recv from rank 1 tag 3").
//   - Culprit is the rank at the root of the failure, in Comm's
//     numbering: the rank that died, gave up first, refused or
//     mismatched the call, or that a timed-out call still waited for; -1
//     if unknown (or, on a sub-communicator, not one of its ranks).
//   - JobCulprit is the culprit's rank in the job (for the job's
//     communicator, Culprit): the rank to leave out of the next
//     communicator, say, whichever communicator failed. -1 if unknown.
//   - Cause says what happened there, in one line.
//   - Err is the full chain of errors.
//
// Its Unwrap gives errors.Is and errors.As the chain, and the sentinel of
// the root cause if the chain lacks it: every rank that gave up a call
// because a rank timed out in it matches ErrTimeout (and ErrPeerLost).
type CallError = blame.CallError

// names is how this communicator numbers and names its ranks in errors.
func (c *Communicator) names() blame.Names {
	n := blame.Names{Comm: c.ext.name, Rank: c.cfg.Rank, Size: c.cfg.Size}
	if c.ext.id != 0 && c.ext.ch != nil {
		n.Members = c.ext.ch
	}
	return n
}

// callError is the error of call what, which failed with err (the full
// chain) on this communicator of several ranks; ran says whether the call
// had started (it is the latest this rank's group numbered).
func (c *Communicator) callError(what string, ran bool, err error) error {
	return blame.Call(c.names(), what, ran, c.g.Recent, err)
}

// p2pError is the error of a point-to-point operation (what: "recv from
// rank 1 tag 3") that failed with err. A lost peer reads as a
// collective's loss does, in one line naming the root cause (a rank that
// gave up says why in its goodbye), though it does not break the
// communicator.
func (c *Communicator) p2pError(what string, err error) error {
	err = c.explainLoss(timedOut(err))
	if !errors.Is(err, ErrPeerLost) {
		return fmt.Errorf("%s: %s: %w", c.names().Prefix(), what, err)
	}
	return blame.P2P(c.names(), what, err)
}
