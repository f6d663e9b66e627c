// Package blame turns a failed call's chain of errors (the link that
// failed here, the goodbyes of the ranks that gave up, what the
// rendezvous store saw leave) into one line naming the rank at the root
// of it: the CallError that package comm returns (comm.CallError is
// this type). How a communicator numbers and names its ranks comes in a
// Names. The link a failure was seen on, and its peer's job rank, it reads
// from the errors' fields (a *transport.PeerError, and in a channel's a
// *collectives.JobRankError), never from their words; what other ranks
// said (their goodbyes, the mismatches they published, the departures
// the store saw) reaches this rank as text, and is read as text.
package blame

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
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
type CallError struct {
	// Comm names the communicator: empty for the job's, else how it was
	// made ("split #1 color 0"; nested splits are listed outermost
	// first). Its ranks are numbered from 0, and Errors name each rank
	// of it with its job rank too.
	Comm string
	// Rank is this rank in Comm's numbering, JobRank in the job's.
	Rank, JobRank int
	// Call is the collective as the ranks numbered it ("allreduce #4
	// (algo ring, 1024 x int32, min)"), or its name if it failed before
	// it was numbered; for a point-to-point operation, what it was
	// ("recv from rank 1 tag 3").
	Call string
	// Culprit is the rank at the root of the failure, in Comm's
	// numbering: the rank that died, gave up first, refused or mismatched
	// the call, or that a timed-out call still waited for; -1 if unknown
	// (or, on a sub-communicator, not one of its ranks).
	Culprit int
	// JobCulprit is the culprit's rank in the job (for the job's
	// communicator, Culprit): the rank to leave out of the next
	// communicator, say, whichever communicator failed. -1 if unknown.
	JobCulprit int
	// Cause says what happened there, in one line.
	Cause string
	// Err is the full chain of errors.
	Err error

	// root is the sentinel of the root cause when the chain here does
	// not carry it: a rank that lost a peer which timed out matches
	// sentinel.Timeout too.
	root error
}

func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString("comm: rank ")
	b.WriteString(strconv.Itoa(e.Rank))
	if e.Comm != "" {
		b.WriteString(" (job rank " + strconv.Itoa(e.JobRank) + ") of " + e.Comm)
	}
	if e.Call != "" {
		b.WriteString(": " + e.Call)
	}
	b.WriteString(": " + e.Cause)
	return b.String()
}

// Unwrap gives errors.Is and errors.As the chain, and the sentinel of
// the root cause if the chain lacks it: every rank that gave up a call
// because a rank timed out in it matches sentinel.Timeout (and transport.ErrPeerLost).
func (e *CallError) Unwrap() []error {
	if e.root != nil {
		return []error{e.Err, e.root}
	}
	return []error{e.Err}
}

var (
	// callHeaderRE matches a call as collectives name it, with the ": "
	// that follows it in a chain.
	callHeaderRE = regexp.MustCompile(`[a-z]+ #\d+ \([^()]*\): `)
	// leadHeaderRE matches a call header where a chain's link starts
	// with one, not where a text quotes a call ("rank 2 called ...").
	leadHeaderRE = regexp.MustCompile(`(^|: )[a-z]+ #\d+ \([^()]*\): `)
	// prefixRE matches what a CallError or a comm error puts before the
	// call: it says which rank failed, which the cause names anyway.
	prefixRE = regexp.MustCompile(`comm: (?:rank \d+(?: \(job rank \d+\) of [^:]*)?: )?`)
	// gaveUpRE matches a peer's goodbye as the transports report it.
	gaveUpRE = regexp.MustCompile(`rank (\d+)(?: \(job rank \d+\))? gave up: `)
	// neverRE matches the ranks a timed-out call still waited for.
	neverRE = regexp.MustCompile(`ranks? (\d+)(?:, \d+)*(?:, and \d+ more)? never reached`)
	// blameRE matches a cause that puts it on a rank it names.
	blameRE = regexp.MustCompile(`^(?:job )?rank \d+(?: \(job rank \d+\))? (?:died|killed|exited|left|refused|called|gave up)`)
	// leadRankRE matches a cause that starts with the rank it is about.
	leadRankRE = regexp.MustCompile(`^(?:lost )?rank (\d+)`)
	// mismatchByeRE matches the goodbye of a rank that found its call
	// mismatched: its rank, its own call, and what the other rank called.
	// toldRE matches a mismatch as its finder published it for the
	// others: what it called, then what the other rank called.
	toldRE        = regexp.MustCompile(`rank (\d+)(?: \(job rank \d+\))? called ([a-z]+ #\d+ \([^()]*\)), rank (\d+)(?: \(job rank \d+\))? called ([a-z]+ #\d+ \([^()]*\))`)
	mismatchByeRE = regexp.MustCompile(`rank (\d+)(?: \(job rank \d+\))? gave up: (?:comm: rank \d+(?: \(job rank \d+\) of [^:]*)?: )?([a-z]+ #\d+ \([^()]*\)): (?:rank|job rank) \d+(?: \(job rank \d+\))? called ([a-z]+ #\d+ \([^()]*\))`)
)

// oddOneOut reads text, a failure's chain, for the goodbye of a rank
// that found its call mismatched with another's and gave up saying what
// the other called. Both are right from where they stand, and the one to
// blame is the one whose call differs from the rest: to a rank whose own
// call, mine, is what the other called, it is the rank that gave up.
// It returns that rank, by the number its goodbye gives, and its call.
// The finder's record in the store names both ranks ("rank 0 called X,
// rank 1 called Y"): the one whose call is not mine is the odd one.
// Goodbyes name job ranks; records, the communicator's own ranks (local
// says which oddOneOut returned).
func oddOneOut(text, mine string) (rank int, call string, local, ok bool) {
	if ms := mismatchByeRE.FindAllStringSubmatch(text, -1); len(ms) > 0 {
		m := ms[len(ms)-1]
		if sameCall(m[3], mine) && !sameCall(m[2], mine) {
			rank, _ = strconv.Atoi(m[1])
			return rank, m[2], false, true
		}
	}
	if m := toldRE.FindStringSubmatch(text); m != nil {
		a, b := 1, 3 // the rank and call said first, and second
		if sameCall(m[2], mine) {
			a, b = b, a
		}
		if sameCall(m[b+1], mine) && !sameCall(m[a+1], mine) {
			rank, _ = strconv.Atoi(m[a])
			return rank, m[a+1], true, true
		}
	}
	return -1, "", false, false
}

// sameCall reports whether call, as a header names it, is mine: the same
// text, or where mine is a call this rank numbered but had not started
// when the failure reached it ("allgather #1 (not started)"), the same
// kind and number.
func sameCall(call, mine string) bool {
	if head, ok := strings.CutSuffix(mine, "(not started)"); ok {
		return strings.HasPrefix(call, head)
	}
	return call == mine
}

// Call is the error of call what, which failed with err (the full
// chain) on a communicator of several ranks, named by n; ran says
// whether the call had started (it is the latest this rank's group
// numbered, recent's answer).
func Call(n Names, what string, ran bool, recent func() []byte, err error) error {
	var ce *CallError
	if errors.As(err, &ce) && ce.Comm == n.Comm && ce.Rank == n.Rank {
		return err
	}
	text := err.Error()
	ce = &CallError{Comm: n.Comm, Rank: n.Rank, JobRank: n.JobRank(n.Rank), Call: what, Culprit: -1, JobCulprit: -1, Err: err}
	lead := 0
	if m := prefixRE.FindStringIndex(text); m != nil && m[0] == 0 {
		lead = m[1]
	}
	if m := callHeaderRE.FindStringIndex(text); m != nil && m[0] == lead {
		ce.Call = strings.TrimSuffix(text[m[0]:m[1]], ": ")
	} else if last := recent(); ran {
		// The chain may not start with the call (a mismatch found here
		// says what both ranks called; a loss the watchdog saw names the
		// link): it is the latest this rank began.
		ce.Call = collectives.DescribeCall(last)
	} else {
		// Never started, but numbered as every rank counts.
		if what == "" {
			what = "call" // a fault the watchdog saw, before the call was numbered
		}
		ce.Call = fmt.Sprintf("%s #%d (not started)", what, collectives.CallNumber(last)+1)
	}
	blame(n, ce, text, err)
	return ce
}

// P2P is the error of a point-to-point operation (what: "recv from
// rank 1 tag 3") that failed with err, a lost peer: it reads as a
// collective's loss does, in one line naming the root cause (a rank that
// gave up says why in its goodbye), though it does not break the
// communicator.
func P2P(n Names, what string, err error) *CallError {
	ce := &CallError{Comm: n.Comm, Rank: n.Rank, JobRank: n.JobRank(n.Rank), Call: what, Culprit: -1, JobCulprit: -1, Err: err}
	text := err.Error()
	if l, ok := linkOf(err); ok && l.own {
		// The communicator's link says the peer again: the call said it.
		text = strings.TrimPrefix(text, l.head)
	}
	blame(n, ce, text, err)
	return ce
}

// link is the link a failure was seen on: the first *transport.PeerError
// in its chain.
type link struct {
	// job is the peer's job rank: the PeerError's own number, or, in a
	// Channel's (a collectives.JobRankError inside), the one it carries.
	job int
	// own says the link is the communicator's (a Channel's, whose call
	// names the peer); else it is the transport's, which numbers peers
	// as the job does (a link lost or never connected).
	own bool
	// head is what the PeerError puts before its cause ("recv from rank
	// 1: "), jobHead what the JobRankError puts after that ("job rank 5:
	// "; "" if none).
	head, jobHead string
}

// linkOf is the link in err's chain, read from the errors' fields; the
// heads are what the errors themselves print before their causes, so
// that a cause is known to start with the link whatever its words.
func linkOf(err error) (link, bool) {
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Err == nil {
		return link{}, false
	}
	l := link{job: pe.Peer, head: strings.TrimSuffix(pe.Error(), pe.Err.Error())}
	if jr, ok := pe.Err.(*collectives.JobRankError); ok {
		l.job, l.own = jr.Rank, true
		if jr.Err != nil {
			l.jobHead = strings.TrimSuffix(jr.Error(), jr.Err.Error())
		}
	}
	return l, true
}

// rank is the link's peer in n's numbering, -1 if not a rank of it.
func (l link) rank(n Names) int {
	r := n.FromJob(l.job)
	if r >= n.Size {
		return -1
	}
	return r
}

// blame fills in ce's Cause and Culprit from text, the failure's chain as
// read, and err, the chain itself.
func blame(n Names, ce *CallError, text string, err error) {
	var inner *CallError
	if errors.As(err, &inner) && inner.Comm != ce.Comm && inner.JobCulprit >= 0 {
		// The communicator this one was split from failed, and ended
		// it: the root cause is that one's, which names the culprit by
		// its job rank (the job's communicator, as "rank J").
		j, cause := inner.JobCulprit, inner.Cause
		if rest, ok := strings.CutPrefix(cause, "rank "+strconv.Itoa(j)+" "); ok && inner.Comm == "" {
			cause = n.JobWho(j) + " " + rest
		}
		ce.Cause, ce.Culprit, ce.JobCulprit, ce.root = cause, n.FromJob(j), j, inner.root
		return
	}
	cause, culprit := rootCause(text)
	ce.Cause = cause
	l, linked := linkOf(err)
	if culprit < 0 && linked && strings.Contains(cause, l.head) {
		// Nothing but the link the failure was seen on names a rank.
		culprit = l.rank(n)
	}
	outside := -1 // the culprit's job rank, where it is no rank of this communicator
	if d, ok := firstDeparture(err); ok && errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, collectives.ErrMismatch) {
		// The rendezvous (or grun) saw which rank left the job first,
		// the others mostly because of it: that is the cause, whatever
		// the link that failed here says. Departures name job ranks.
		if why, gave := strings.CutPrefix(d.Why, "give up: "); gave {
			cause, culprit = rootCause("rank " + strconv.Itoa(d.Rank) + " gave up: " + why)
			ce.Cause = cause
			if rest, ok := strings.CutPrefix(cause, "rank "+strconv.Itoa(culprit)+" "); ok && n.Comm != "" {
				ce.Cause = n.JobWho(culprit) + " " + rest
				culprit = n.FromJob(culprit)
			}
		} else {
			culprit, outside = n.FromJob(d.Rank), d.Rank
			ce.Cause = n.JobWho(d.Rank) + " " + strings.Replace(d.Why, "die (", "died (", 1)
		}
	} else if n.Comm != "" && culprit >= 0 {
		// The transports name the rank of a goodbye by its job rank.
		if rest, ok := strings.CutPrefix(cause, "rank "+strconv.Itoa(culprit)+" gave up: "); ok {
			ce.Cause = n.JobWho(culprit) + " gave up: " + rest
			culprit = n.FromJob(culprit)
		}
	}
	if odd, call, local, ok := oddOneOut(text, ce.Call); ok {
		// A bystander: the rank that found the mismatch named the call
		// this rank made too, so the other one is the odd one out.
		if !local {
			odd = n.FromJob(odd)
		}
		if odd >= 0 {
			ce.Cause = fmt.Sprintf("%s called %s: %v", n.WhoIs(odd), call, collectives.ErrMismatch)
			culprit = odd
		}
	}
	if rest, ok := strings.CutPrefix(ce.Cause, l.head); linked && ok && errors.Is(err, transport.ErrPeerLost) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		// All that is known is the link it was seen on, which names the
		// peer (by its job rank, read from the errors): say who it is,
		// as every rank would.
		r, who := l.rank(n), ""
		if r >= 0 {
			who = n.WhoIs(r)
		} else {
			who, outside = "job rank "+strconv.Itoa(l.job), l.job
		}
		rest = strings.TrimPrefix(rest, l.jobHead)
		ce.Cause = who + " was lost: " + strings.TrimPrefix(rest, transport.ErrPeerLost.Error()+": ")
		culprit = r
	}
	if strings.Contains(ce.Cause, "timed out") && !errors.Is(err, sentinel.Timeout) {
		ce.root = sentinel.Timeout
	}
	if !errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, sentinel.Timeout) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, sentinel.Aborted) || errors.Is(err, sentinel.Closed)) {
		// This rank's own context, Abort or Close ended its call.
		culprit = n.Rank
	}
	if culprit >= n.Size {
		culprit = -1
	}
	ce.Culprit, ce.JobCulprit = culprit, outside
	if culprit >= 0 {
		ce.JobCulprit = n.JobRank(culprit)
	}
}

// ChainOf is the full chain behind a CallError, for the log.
func ChainOf(err error) error {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Err
	}
	return err
}

// rootCause reduces the text of a failure's chain to its root: the
// deepest goodbye in it (a rank that gave up, quoting what made it give
// up, which may be another rank's goodbye), without the call headers and
// rank prefixes each rank adds on the way and the notes on what else was
// seen. culprit is the rank a goodbye or record in it names first, -1 if
// none (the link a failure was seen on is read from the chain: linkOf).
func rootCause(text string) (cause string, culprit int) {
	for _, note := range []string{" (the rendezvous saw ", " (also lost: ", " (the other ranks were told", " (rendezvous unreachable too: "} {
		if i := strings.Index(text, note); i > 0 {
			text = text[:i]
		}
	}
	if ms := gaveUpRE.FindAllStringIndex(text, -1); len(ms) > 0 {
		text = text[ms[len(ms)-1][0]:]
	}
	text = prefixRE.ReplaceAllString(text, "")
	text = leadHeaderRE.ReplaceAllString(text, "$1")
	if m := gaveUpRE.FindStringIndex(text); m != nil && m[0] == 0 && blameRE.MatchString(text[m[1]:]) {
		// It gave up because of another rank, which it names.
		text = text[m[1]:]
	}
	if rest, ok := strings.CutPrefix(text, "this rank called "); ok {
		// A mismatch found here: the call is said already.
		if _, other, ok := strings.Cut(rest, "), "); ok {
			text = other
		}
	}
	text = strings.TrimSuffix(text, ": "+transport.ErrPeerLost.Error())
	text = strings.ReplaceAll(text, "\n", " ")
	if len(text) > 300 {
		text = text[:297] + "..."
	}
	culprit = -1
	if m := neverRE.FindStringSubmatch(text); m != nil {
		culprit, _ = strconv.Atoi(m[1])
	} else if m := leadRankRE.FindStringSubmatch(text); m != nil {
		culprit, _ = strconv.Atoi(m[1])
	}
	return text, culprit
}

// firstDeparture is the departure in err's chain (see Departed) at the
// root of the others: the first rank the rendezvous saw die, if one did
// (a rank that gave up because of it may have told the rendezvous
// first), else the first to give up, else the first to go. A rank that
// exited with an error status most likely gave up too, its goodbye to
// the rendezvous overtaken by grun's word of its exit: it is no death.
func firstDeparture(err error) (bootstrap.Departure, bool) {
	var d Departed
	if !errors.As(err, &d) || len(d.Departures) == 0 {
		return bootstrap.Departure{}, false
	}
	for _, x := range d.Departures {
		if strings.HasPrefix(x.Why, "die") || strings.HasPrefix(x.Why, "killed") || strings.HasPrefix(x.Why, "lost") || strings.Contains(x.Why, "without closing") {
			return x, true
		}
	}
	for _, x := range d.Departures {
		if strings.HasPrefix(x.Why, "give up") {
			return x, true
		}
	}
	return d.Departures[0], true
}
