// Package probe is what the ranks of a communicator tell one another
// about their calls through the rendezvous store, and what comparing
// them shows: the stall probe (a call that waits publishes what it
// called, and two ranks in the same call with different arguments fail
// it with collectives.ErrMismatch, as no message header can show when
// every rank waits to receive), the faults a rank publishes before it
// drops its links, the ranks a timed-out call still waited for, and, at
// Close, the last calls compared (a mismatched last call, a rank that
// closed early). Package comm's watchdog and Close drive it through a
// Board: the store, the communicator's key prefix and its Names.
package probe

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/internal/stallreport"
	"github.com/gocoll/gocoll/transport"
)

// Store is the part of the rendezvous client (bootstrap.Client) a Board
// uses.
type Store interface {
	Put(ctx context.Context, key string, value []byte) error
	Scan(ctx context.Context, prefix string) (map[string][]byte, error)
	Departures(ctx context.Context, wait time.Duration) ([]bootstrap.Departure, error)
}

// Board is one communicator's page in the store.
type Board struct {
	// Store is the job's store; nil for a job of one rank, where every
	// method does nothing.
	Store Store
	// Prefix is where the communicator's ranks publish ("calls/<id>/"):
	// the job and each sub-communicator have their own.
	Prefix string
	// Names numbers the communicator's ranks; Members nil marks the
	// job's own communicator.
	Names blame.Names
}

// A collective whose ranks disagree on its arguments fails as soon as one
// rank receives a message whose call header differs from its own. Some
// disagreements leave every rank waiting to receive, so no header ever
// arrives: a broadcast whose ranks name different roots, each waiting for
// a parent in its own tree. The watchdog finds those: once a collective
// has waited stallProbeAfter, it publishes the call this rank is in under
// the communicator's key in the rendezvous store and reads what the other
// stalled ranks published. Two ranks in the same call with different
// arguments fail it with collectives.ErrMismatch, naming both calls. It asks again,
// less and less often, while the call waits; a call that finishes in
// time costs nothing.
const (
	stallProbeAfter = 40 * time.Millisecond
	stallProbeMax   = time.Second
)

// Schedule is the watchdog's probing schedule for the running
// collective; its zero value starts one.
type Schedule struct {
	next  time.Duration // running time at which to probe next
	every time.Duration
}

// Due reports whether a collective that has run for d should probe now,
// and moves the schedule on if so.
func (s *Schedule) Due(d time.Duration) bool {
	if s.next == 0 {
		s.next, s.every = stallProbeAfter, stallProbeAfter
	}
	if d < s.next {
		return false
	}
	s.every = min(2*s.every, stallProbeMax)
	s.next = d + s.every
	return true
}

// Probe publishes mine, this rank's last calls (the group's Recent), and compares them with those the
// other ranks published. It returns the collectives.ErrMismatch error of the first
// rank found in the same call with other arguments, else the earliest
// fault a rank published before dropping out (collectives.ErrMismatch or transport.ErrPeerLost,
// see publishFault), else nil; and the number of each rank's latest
// published call (0: none), for a timeout to say which ranks never came.
// A rank that has made no call yet (mine empty) publishes and compares
// nothing, but still reads the faults: a peer that refused its first call
// dropped its links, and this rank, idle, must learn why.
func (b Board) Probe(ctx context.Context, mine []byte) (mismatch error, at map[int]uint64) {
	if b.Store == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	prefix := b.Prefix
	if mine != nil {
		if err := b.Store.Put(ctx, prefix+strconv.Itoa(b.Names.Rank), mine); err != nil {
			return nil, nil
		}
	}
	m, err := b.Store.Scan(ctx, prefix)
	if err != nil {
		return nil, nil
	}
	at = make(map[int]uint64, len(m))
	for k, v := range m {
		if r, err := strconv.Atoi(strings.TrimPrefix(k, prefix)); err == nil && r >= 0 && r < b.Names.Size {
			at[r] = collectives.CallNumber(v)
		}
	}
	for r := range b.Names.Size {
		if v, ok := m[prefix+strconv.Itoa(r)]; ok && mine != nil && r != b.Names.Rank {
			if err := collectives.Disagree(mine, v, r); err != nil {
				return err, at
			}
		}
	}
	if f, ok := firstFault(m, prefix+"fault/"); ok {
		sentinel := collectives.ErrMismatch
		if f.kind == "lost" {
			sentinel = transport.ErrPeerLost
		}
		return Told{fmt.Errorf("%s: %s: %w", collectives.DescribeCall(mine), f.text, sentinel)}, at
	}
	return nil, at
}

// PublishLast publishes last, this rank's last calls, as it closes: a rank still
// waiting in one of them (it disagreed on the root of a broadcast or a
// scatter that was the others' last call, and they are done) compares
// them with its own when it sees this rank go, and says so (collectives.ErrMismatch),
// rather than only that a peer closed.
func (b Board) PublishLast(last []byte) {
	if b.Store == nil || last == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	b.Store.Put(ctx, b.Prefix+strconv.Itoa(b.Names.Rank), last)
	// And that these are its last: a rank waiting in a later call reads
	// here that this one closed before it (see closedBefore).
	b.Store.Put(ctx, b.Prefix+"closed/"+strconv.Itoa(b.Names.Rank), last)
}

// ClosedBefore says which rank closed the communicator while this one
// still needed it, as its publishLast record shows: the cause of a link
// closed in good order under a call, or nil if no rank closed.
func (b Board) ClosedBefore() error {
	if b.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	prefix := b.Prefix + "closed/"
	m, err := b.Store.Scan(ctx, prefix)
	if err != nil {
		return nil
	}
	if len(m) == 0 || b.othersDeparted() {
		return nil // a loss, not a close, is the cause
	}
	first, at := -1, uint64(0)
	for r := range b.Names.Size {
		v, ok := m[prefix+strconv.Itoa(r)]
		if !ok || r == b.Names.Rank {
			continue
		}
		if n := collectives.CallNumber(v); first < 0 || n < at {
			first, at = r, n
		}
	}
	if first < 0 {
		return nil
	}
	return fmt.Errorf("%s left %s after call #%d (it closed its communicator): %w", b.Names.WhoIs(first), b.scope(), at, transport.ErrPeerLost)
}

// closeVerdictWait: once Close's comparison (CompareLast) sees a rank in
// a later call, it waits this long at most for the rest (a rank waiting
// in a point-to-point call publishes nothing). Until then it waits for
// every rank's last call, or its departure, however long that takes
// within the bound the caller gives: a mismatch is never let pass
// because a rank was slow to close.
const (
	closeVerdictWait = 500 * time.Millisecond
	// departedLookEvery is how often Close's comparison asks the store
	// whether a rank died meanwhile.
	departedLookEvery = 50 * time.Millisecond
	// storeWait bounds one request to the store at Close.
	storeWait = 2 * time.Second
)

// ErrUnconfirmed is what CompareLast wraps when it could not learn a
// rank's last call within its bound: comm.ErrUnconfirmed.
var ErrUnconfirmed = sentinel.Unconfirmed

// CompareLast compares mine, this rank's last calls as it closes, with
// those the other ranks publish as they close (PublishLast) or while
// they wait in a call (Probe): see comm's lastCallsAgree, which calls it
// only while no rank is known lost and this one did not abort. It waits
// until every other rank has published its last call as it closed, gone
// on to a later one, given up, or left the job, for at most wait; a rank
// not heard from by then makes it return ErrUnconfirmed naming that
// rank, never nil. A store gone meanwhile (its host closed, having
// waited for every rank's comparison) ends the wait, and only what was
// seen counts.
func (b Board) CompareLast(mine []byte, wait time.Duration) error {
	if b.Store == nil || b.Names.Size == 1 {
		return nil
	}
	n := collectives.CallNumber(mine)
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	verdictBy := time.Now().Add(closeVerdictWait)
	prefix := b.Prefix
	// Ranks that left the job before this Close (a call of theirs timed
	// out waiting for this rank, say) wait for nothing now, and said why
	// themselves: what they called is no news to them.
	seen := b.departedRanks(ctx)
	var level int    // ranks that closed after this rank's last call, as it does
	var beyond []int // ranks seen in a later call, which this one never made
	var later []byte // the first of those ranks' calls
	var looked time.Time
	storeGone := false
	for {
		if time.Since(looked) >= departedLookEvery {
			// A rank that died or left without closing (the store saw
			// it) is the cause of whatever the others do next, as at
			// the end below: stop waiting at once. A rank in a
			// point-to-point call with this one publishes nothing, and
			// learns of the death only when this rank's links end.
			if b.othersDeparted() {
				return nil
			}
			// A rank that gave up and left (it said why itself) has no
			// last call to wait for.
			for r := range b.departedRanks(ctx) {
				seen[r] = true
			}
			looked = time.Now()
		}
		m, err := b.Store.Scan(ctx, prefix)
		if err != nil {
			// The store is gone (it lived in a rank that closed, which
			// lingered, LingerForChecks, until every rank had compared or
			// left), or the bound passed.
			storeGone = ctx.Err() == nil
			break
		}
		for r := range b.Names.Size {
			if _, gave := m[prefix+"gaveup/"+strconv.Itoa(r)]; gave && r != b.Names.Rank && !seen[r] {
				seen[r] = true // failed its call, and said why itself
				continue
			}
			v, ok := m[prefix+strconv.Itoa(r)]
			if r == b.Names.Rank || seen[r] || !ok || collectives.CallNumber(v) < n {
				continue
			}
			if collectives.CallNumber(v) > n {
				seen[r] = true
				if beyond = append(beyond, r); later == nil {
					later = v
				}
				continue
			}
			if err := collectives.Disagree(mine, v, r); err != nil {
				return err
			}
			// At this rank's last call, as it closed; a record published
			// while it waited in that call may be stale, the rank gone on
			// to the next.
			if _, closed := m[prefix+"closed/"+strconv.Itoa(r)]; closed {
				seen[r] = true
				level++
			}
		}
		if f, ok := firstFault(m, prefix+"fault/"); ok && f.kind == "mismatch" {
			// Another rank found the calls mismatched, in one this rank
			// finished its part of.
			return Told{fmt.Errorf("%s: %w", f.text, collectives.ErrMismatch)}
		}
		if len(seen) >= b.Names.Size-1 || len(beyond) > 0 && time.Now().After(verdictBy) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	slices.Sort(beyond)
	if b.othersDeparted() {
		// A rank that left the job abnormally: the others went on to a
		// call it left them waiting in, and that loss, which their
		// errors name, is the cause.
		return nil
	}
	if len(beyond) == 0 {
		for r := range b.Names.Size {
			if r != b.Names.Rank && !seen[r] && !storeGone {
				// Neither its last call nor its departure came in time:
				// passing would let a mismatch go unseen.
				return fmt.Errorf("could not confirm %s's last call within %v: %w", b.Names.WhoIs(r), wait, ErrUnconfirmed)
			}
		}
		return nil
	}
	// The ranks made different numbers of calls. The odd ones are the
	// fewer: this rank, which closed while as many or more went on (a
	// rank that closed early), or the ranks that went on while more
	// closed with it (a rank that made one call too many).
	if len(beyond) >= level+1 {
		err := fmt.Errorf("this rank left %s after call #%d (it closed its communicator) while %s went on to %s: %w",
			b.scope(), n, b.ranksWord(beyond), collectives.DescribeCall(later), collectives.ErrMismatch)
		if b.Names.Members == nil {
			// For the launcher's summary: the others fail because of
			// this rank, which may itself exit 0.
			pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer pcancel()
			b.Store.Put(pctx, bootstrap.ClosedEarlyPrefix+strconv.Itoa(b.Names.Rank),
				[]byte(strings.Replace(strings.TrimSuffix(err.Error(), ": "+collectives.ErrMismatch.Error()), "this rank", b.Names.WhoIs(b.Names.Rank), 1)))
		}
		return err
	}
	return fmt.Errorf("%s called %s after this rank's last call, %s: %w",
		b.ranksWord(beyond), collectives.DescribeCall(later), collectives.DescribeCall(mine), collectives.ErrMismatch)
}

// SayGaveUp tells the store that this rank's call failed and the
// communicator is broken here: it waits for no rank any more, and its
// error said why. Close's comparison (CompareLast) then does not take the
// call it was in for one the closing rank left it waiting in.
func (b Board) SayGaveUp() {
	if b.Store == nil || b.Names.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	b.Store.Put(ctx, b.Prefix+"gaveup/"+strconv.Itoa(b.Names.Rank), nil)
}

// departedRanks is the set of this communicator's ranks, other than this
// one, that the store saw leave the job by now, for any reason.
func (b Board) departedRanks(ctx context.Context) map[int]bool {
	gone := make(map[int]bool, b.Names.Size)
	ds, err := b.Store.Departures(ctx, 0)
	if err != nil {
		return gone
	}
	for _, d := range ds {
		if r := b.Names.FromJob(d.Rank); r >= 0 && r != b.Names.Rank {
			gone[r] = true
		}
	}
	return gone
}

// othersDeparted reports whether the store saw a rank other than this one
// die, or leave without closing, by now. A rank that gave up does not
// count: it may have given up because of the very calls compared here.
// A sub-communicator counts any job rank's departure: it breaks the job
// the sub-communicator shares.
func (b Board) othersDeparted() bool {
	return len(b.departed(b.Names.Members == nil, 0)) > 0
}

// departed is what othersDeparted looks for, first first: departures
// of this communicator's members only, or, with members false, of any
// rank other than this one. It waits up to wait for a first departure.
func (b Board) departed(members bool, wait time.Duration) []bootstrap.Departure {
	ctx, cancel := context.WithTimeout(context.Background(), wait+500*time.Millisecond)
	defer cancel()
	ds, err := b.Store.Departures(ctx, wait)
	if err != nil {
		return nil
	}
	me := b.Names.JobRank(b.Names.Rank)
	return slices.DeleteFunc(ds, func(d bootstrap.Departure) bool {
		return d.Rank == me || strings.HasPrefix(d.Why, "give up") || members && b.Names.FromJob(d.Rank) < 0
	})
}

// LeftUnclosed is the error of a Close whose calls all passed here
// while a member of the communicator died or left the job without
// closing (the store saw it): the calls this rank made after that member
// left passed only because it had no part in them (a leaf of a
// broadcast, a point-to-point exchange between others), and no call of
// this rank will ever say so. nil if no member left so; mine is this
// rank's last calls (the group's Recent). It waits up to wait for the
// store to see a first departure (a link lost may tell sooner).
func (b Board) LeftUnclosed(mine []byte, wait time.Duration) error {
	if b.Store == nil || b.Names.Size == 1 {
		return nil
	}
	ds := b.departed(true, wait)
	if len(ds) == 0 {
		return nil
	}
	d := ds[0]
	return fmt.Errorf("%s %s before it closed, so it may have missed this rank's calls up to %s: %w",
		b.Names.WhoIs(b.Names.FromJob(d.Rank)), strings.Replace(d.Why, "die (", "died (", 1), collectives.DescribeCall(mine), transport.ErrPeerLost)
}

// scope names what a rank that closes leaves: the job, or a
// sub-communicator.
func (b Board) scope() string {
	if b.Names.Comm != "" {
		return "the communicator"
	}
	return "the job"
}

// ranksWord names the ranks rs of this communicator for errors: "rank 3",
// "ranks 0, 2 and 3" (at most 8, then how many more).
func (b Board) ranksWord(rs []int) string {
	if len(rs) == 1 {
		return b.Names.WhoIs(rs[0])
	}
	var names []string
	for i, r := range rs {
		if i == 8 {
			names = append(names, fmt.Sprintf("%d more", len(rs)-8))
			break
		}
		names = append(names, strconv.Itoa(r))
	}
	return "ranks " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// SaidChecked tells the rank whose process holds the store that this
// one is done with it (see LingerForChecks).
func (b Board) SaidChecked() {
	if b.Store == nil || b.Names.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeWait)
	defer cancel()
	b.Store.Put(ctx, b.Prefix+"checked/"+strconv.Itoa(b.Names.Rank), nil)
}

// LingerForChecks keeps the store up, in the rank whose process holds it
// (no launcher's store: see Config), until the other ranks closing with
// it have compared their last calls (CompareLast), or for at most wait,
// the bound they compare within. A rank the store saw leave will compare
// nothing: it is not waited for.
func (b Board) LingerForChecks(wait time.Duration) {
	if b.Store == nil || b.Names.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	prefix := b.Prefix + "checked/"
	var gone map[int]bool
	var looked time.Time
	for {
		if time.Since(looked) >= departedLookEvery {
			gone = b.departedRanks(ctx)
			looked = time.Now()
		}
		m, err := b.Store.Scan(ctx, prefix)
		if err != nil {
			return
		}
		done := len(gone)
		for r := range gone {
			if _, ok := m[prefix+strconv.Itoa(r)]; ok {
				done-- // counted below
			}
		}
		if done+len(m) >= b.Names.Size {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fault is one rank's report of why it dropped out (see PublishFault).
type fault struct {
	kind, text string
	at         int64
}

// firstFault is the earliest report under prefix: the cause; the later
// ones are ranks that broke because of it.
func firstFault(m map[string][]byte, prefix string) (fault, bool) {
	var first fault
	found := false
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		parts := strings.SplitN(string(v), "\t", 3)
		if len(parts) != 3 {
			continue
		}
		at, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			continue
		}
		if !found || at < first.at {
			first, found = fault{kind: parts[0], text: parts[2], at: at}, true
		}
	}
	return first, found
}

// Told is an error this rank read in the store, published by the rank
// that found it: not to be published again.
type Told struct{ error }

func (t Told) Unwrap() error { return t.error }

// PublishFault tells the communicator's other ranks, through the store,
// why this rank is about to drop its links: it found a call mismatched or
// refused one they are in (mismatch true: they fail with collectives.ErrMismatch), or
// gave one up before it started (they fail with transport.ErrPeerLost). They see
// only the links go; probe finds the reason here.
func (b Board) PublishFault(mismatch bool, text string) {
	if b.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	text = strings.TrimSuffix(text, ": "+collectives.ErrMismatch.Error())
	if len(text) > 400 {
		text = text[:397] + "..."
	}
	kind := "lost"
	if mismatch {
		kind = "mismatch"
	}
	// Each rank has its own key, stamped, so that a later report (a rank
	// that broke because of the first) never hides the first.
	v := fmt.Sprintf("%s\t%d\t%s", kind, time.Now().UnixNano(), text)
	b.Store.Put(ctx, b.Prefix+"fault/"+strconv.Itoa(b.Names.Rank), []byte(v))
}

// Absent names the ranks that have not published the call this rank is
// in, nor any later one: after a timeout, the ranks it was waiting for.
// Ranks that are themselves waiting publish their call, so the ones
// missing are stopped, busy elsewhere, or in an earlier call.
func (b Board) Absent(mine []byte, at map[int]uint64) string {
	n := collectives.CallNumber(mine)
	if at == nil || n == 0 {
		return ""
	}
	var names []string
	for r := range b.Names.Size {
		if r != b.Names.Rank && at[r] < n {
			names = append(names, strconv.Itoa(r))
		}
	}
	if len(names) == 0 {
		return ""
	}
	if len(names) > 8 {
		names = append(names[:8], fmt.Sprintf("and %d more", len(names)-8))
	}
	word := "rank"
	if len(names) > 1 {
		word = "ranks"
	}
	seen := ""
	if len(names) == 1 {
		r, _ := strconv.Atoi(names[0])
		seen = b.lastSeen(r)
	}
	return fmt.Sprintf("; %s %s never reached call #%d%s", word, strings.Join(names, ", "), n, seen)
}

// lastSeen says what rank r was doing at the job's last stall report
// (report.go), if one was made: ", at the stall report 2s in it had
// finished allreduce #2 1s before". Only the job's communicator asks.
func (b Board) lastSeen(r int) string {
	if b.Store == nil || b.Names.Members != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	reqs, err := b.Store.Scan(ctx, stallreport.RequestPrefix())
	if err != nil || len(reqs) == 0 {
		return ""
	}
	k := len(reqs)
	v, err := b.Store.Scan(ctx, stallreport.AnswerKey(k, r))
	if err != nil {
		return ""
	}
	ans, ok := v[stallreport.AnswerKey(k, r)]
	if !ok {
		return " (nor answered the stall report: stopped or frozen?)"
	}
	st, err := stallreport.Decode(ans)
	if err != nil || len(st.Comms) == 0 || st.Comms[0].Running {
		return ""
	}
	return fmt.Sprintf(" (at the stall report it had finished %s %v before)", st.Comms[0].Call, st.Comms[0].Idle.Round(100*time.Millisecond))
}
