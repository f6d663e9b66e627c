package comm

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
	"github.com/gocoll/gocoll/internal/stallreport"
)

// A collective whose ranks disagree on its arguments fails as soon as one
// rank receives a message whose call header differs from its own. Some
// disagreements leave every rank waiting to receive, so no header ever
// arrives: a broadcast whose ranks name different roots, each waiting for
// a parent in its own tree. The watchdog finds those: once a collective
// has waited stallProbeAfter, it publishes the call this rank is in under
// the communicator's key in the rendezvous store and reads what the other
// stalled ranks published. Two ranks in the same call with different
// arguments fail it with ErrMismatch, naming both calls. It asks again,
// less and less often, while the call waits; a call that finishes in
// time costs nothing.
const (
	stallProbeAfter = 40 * time.Millisecond
	stallProbeMax   = time.Second
	// stallTick is the watchdog's period while a collective runs: it
	// bounds how late a probe starts.
	stallTick = 20 * time.Millisecond
)

// stall is the watchdog's probing schedule for the running collective.
type stall struct {
	next  time.Duration // running time at which to probe next
	every time.Duration
}

// due reports whether a collective that has run for d should probe now,
// and moves the schedule on if so.
func (s *stall) due(d time.Duration) bool {
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

// callsKey is where the ranks of this communicator publish their stalled
// calls; the job and each sub-communicator have their own.
func (c *Communicator) callsKey() string { return "calls/" + strconv.FormatUint(c.ext.id, 16) + "/" }

// probe publishes this rank's last calls and compares them with those the
// other ranks published. It returns the ErrMismatch error of the first
// rank found in the same call with other arguments, else the earliest
// fault a rank published before dropping out (ErrMismatch or ErrPeerLost,
// see publishFault), else nil; and the number of each rank's latest
// published call (0: none), for a timeout to say which ranks never came.
func (c *Communicator) probe(ctx context.Context) (mismatch error, at map[int]uint64) {
	mine := c.g.Recent()
	if c.calls == nil || mine == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	prefix := c.callsKey()
	if err := c.calls.Put(ctx, prefix+strconv.Itoa(c.cfg.Rank), mine); err != nil {
		return nil, nil
	}
	m, err := c.calls.Scan(ctx, prefix)
	if err != nil {
		return nil, nil
	}
	at = make(map[int]uint64, len(m))
	for k, v := range m {
		if r, err := strconv.Atoi(strings.TrimPrefix(k, prefix)); err == nil && r >= 0 && r < c.cfg.Size {
			at[r] = collectives.CallNumber(v)
		}
	}
	for r := range c.cfg.Size {
		if v, ok := m[prefix+strconv.Itoa(r)]; ok && r != c.cfg.Rank {
			if err := collectives.Disagree(mine, v, r); err != nil {
				return err, at
			}
		}
	}
	if f, ok := firstFault(m, prefix+"fault/"); ok {
		sentinel := ErrMismatch
		if f.kind == "lost" {
			sentinel = ErrPeerLost
		}
		return told{fmt.Errorf("%s: %s: %w", collectives.DescribeCall(mine), f.text, sentinel)}, at
	}
	return nil, at
}

// publishLast publishes this rank's last calls as it closes: a rank still
// waiting in one of them (it disagreed on the root of a broadcast or a
// scatter that was the others' last call, and they are done) compares
// them with its own when it sees this rank go, and says so (ErrMismatch),
// rather than only that a peer closed.
func (c *Communicator) publishLast() {
	if c.calls == nil || c.g == nil || c.broken.Load() != nil {
		return
	}
	last := c.g.Recent()
	if last == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.calls.Put(ctx, c.callsKey()+strconv.Itoa(c.cfg.Rank), last)
	// And that these are its last: a rank waiting in a later call reads
	// here that this one closed before it (see closedBefore).
	c.calls.Put(ctx, c.callsKey()+"closed/"+strconv.Itoa(c.cfg.Rank), last)
}

// closedBefore says which rank closed the communicator while this one
// still needed it, as its publishLast record shows: the cause of a link
// closed in good order under a call, or nil if no rank closed.
func (c *Communicator) closedBefore() error {
	if c.calls == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	prefix := c.callsKey() + "closed/"
	m, err := c.calls.Scan(ctx, prefix)
	if err != nil {
		return nil
	}
	if len(m) == 0 || c.othersDeparted() {
		return nil // a loss, not a close, is the cause
	}
	first, at := -1, uint64(0)
	for r := range c.cfg.Size {
		v, ok := m[prefix+strconv.Itoa(r)]
		if !ok || r == c.cfg.Rank {
			continue
		}
		if n := collectives.CallNumber(v); first < 0 || n < at {
			first, at = r, n
		}
	}
	if first < 0 {
		return nil
	}
	return fmt.Errorf("%s left %s after call #%d (it closed its communicator): %w", c.names().WhoIs(first), c.scope(), at, ErrPeerLost)
}

// closeCompareWait bounds how long Close waits for the other ranks'
// last calls (see lastCallsAgree). Ranks that end together close within
// milliseconds of one another, and a rank waiting in a call the others
// never made publishes it within stallProbeAfter and a tick; one still
// busy after it is not waited for.
const closeCompareWait = 500 * time.Millisecond

// lastCallsAgree compares this rank's last calls, as it closes, with
// those the other ranks publish as they close (publishLast) or while they
// wait in a call (probe). It catches what no rank could see while the
// calls ran: a last broadcast or scatter whose ranks named different
// roots can finish on every rank, each root's sends buffered and never
// read, and each rank with what it believes the result; a rank that
// called one collective more than the others (its peers finished their
// part of a point-to-point exchange or a tree it had no part in, and
// closed); or a mismatch another rank found and published. Only a
// comparison of the calls shows them mismatched. A mismatch found here is
// published, so that the rank left waiting reads why this one went.
func (c *Communicator) lastCallsAgree() error {
	err := c.compareLast()
	if err != nil {
		if _, read := err.(told); !read {
			c.publishMismatch(err)
		}
	}
	return err
}

func (c *Communicator) compareLast() error {
	if c.calls == nil || c.g == nil || c.cfg.Size == 1 || c.broken.Load() != nil || c.faulted.Load() || c.stopping.Load() {
		return nil // a rank is lost or this one aborted: no rank to wait for
	}
	mine := c.g.Recent()
	n := collectives.CallNumber(mine)
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeCompareWait)
	defer cancel()
	prefix := c.callsKey()
	// Ranks that left the job before this Close (a call of theirs timed
	// out waiting for this rank, say) wait for nothing now, and said why
	// themselves: what they called is no news to them.
	seen := c.departedRanks(ctx)
	var level int    // ranks that closed after this rank's last call, as it does
	var beyond []int // ranks seen in a later call, which this one never made
	var later []byte // the first of those ranks' calls
	for {
		m, err := c.calls.Scan(ctx, prefix)
		if err != nil {
			break // the store is gone (it lived in a rank that closed)
		}
		for r := range c.cfg.Size {
			if _, gave := m[prefix+"gaveup/"+strconv.Itoa(r)]; gave && r != c.cfg.Rank && !seen[r] {
				seen[r] = true // failed its call, and said why itself
				continue
			}
			v, ok := m[prefix+strconv.Itoa(r)]
			if r == c.cfg.Rank || seen[r] || !ok || collectives.CallNumber(v) < n {
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
			return told{fmt.Errorf("%s: %w", f.text, ErrMismatch)}
		}
		if len(seen) >= c.cfg.Size-1 {
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
	if len(beyond) == 0 || c.othersDeparted() {
		// No call beyond, or a rank that left the job abnormally: the
		// others went on to a call it left them waiting in, and that
		// loss, which their errors name, is the cause.
		return nil
	}
	// The ranks made different numbers of calls. The odd ones are the
	// fewer: this rank, which closed while as many or more went on (a
	// rank that closed early), or the ranks that went on while more
	// closed with it (a rank that made one call too many).
	if len(beyond) >= level+1 {
		err := fmt.Errorf("this rank left %s after call #%d (it closed its communicator) while %s went on to %s: %w",
			c.scope(), n, c.ranksWord(beyond), collectives.DescribeCall(later), ErrMismatch)
		if c.ext.id == 0 {
			// For the launcher's summary: the others fail because of
			// this rank, which may itself exit 0.
			pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer pcancel()
			c.calls.Put(pctx, bootstrap.ClosedEarlyPrefix+strconv.Itoa(c.cfg.Rank),
				[]byte(strings.Replace(strings.TrimSuffix(err.Error(), ": "+ErrMismatch.Error()), "this rank", c.names().WhoIs(c.cfg.Rank), 1)))
		}
		return err
	}
	return fmt.Errorf("%s called %s after this rank's last call, %s: %w",
		c.ranksWord(beyond), collectives.DescribeCall(later), collectives.DescribeCall(mine), ErrMismatch)
}

// sayGaveUp tells the store that this rank's call failed and the
// communicator is broken here: it waits for no rank any more, and its
// error said why. Close's comparison (compareLast) then does not take the
// call it was in for one the closing rank left it waiting in.
func (c *Communicator) sayGaveUp() {
	if c.calls == nil || c.cfg.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.calls.Put(ctx, c.callsKey()+"gaveup/"+strconv.Itoa(c.cfg.Rank), nil)
}

// departedRanks is the set of this communicator's ranks, other than this
// one, that the store saw leave the job by now, for any reason.
func (c *Communicator) departedRanks(ctx context.Context) map[int]bool {
	gone := make(map[int]bool, c.cfg.Size)
	ds, err := c.calls.Departures(ctx, 0)
	if err != nil {
		return gone
	}
	for _, d := range ds {
		if r := c.names().FromJob(d.Rank); r >= 0 && r != c.cfg.Rank {
			gone[r] = true
		}
	}
	return gone
}

// othersDeparted reports whether the store saw a rank other than this one
// die, or leave without closing, by now. A rank that gave up does not
// count: it may have given up because of the very calls compared here.
func (c *Communicator) othersDeparted() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ds, err := c.calls.Departures(ctx, 0)
	if err != nil {
		return false
	}
	if c.ext.id == 0 {
		ds = blame.OthersGone(c.names(), ds)
	} else {
		// A sub-communicator: departures name job ranks, and any rank's
		// breaks the job it shares.
		me := c.names().JobRank(c.cfg.Rank)
		ds = slices.DeleteFunc(ds, func(d bootstrap.Departure) bool { return d.Rank == me })
	}
	return slices.ContainsFunc(ds, func(d bootstrap.Departure) bool { return !strings.HasPrefix(d.Why, "give up") })
}

// scope names what a rank that closes leaves: the job, or a
// sub-communicator.
func (c *Communicator) scope() string {
	if c.ext.name != "" {
		return "the communicator"
	}
	return "the job"
}

// ranksWord names the ranks rs of this communicator for errors: "rank 3",
// "ranks 0, 2 and 3" (at most 8, then how many more).
func (c *Communicator) ranksWord(rs []int) string {
	if len(rs) == 1 {
		return c.names().WhoIs(rs[0])
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

// saidChecked tells the rank whose process holds the store that this
// one is done with it (see lingerForChecks).
func (c *Communicator) saidChecked() {
	if c.calls == nil || c.cfg.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeCompareWait)
	defer cancel()
	c.calls.Put(ctx, c.callsKey()+"checked/"+strconv.Itoa(c.cfg.Rank), nil)
}

// lingerForChecks keeps the store up, in the rank whose process holds it
// (no launcher's store: see Config), until the other ranks closing with
// it have compared their last calls (lastCallsAgree), or for at most
// closeCompareWait.
func (c *Communicator) lingerForChecks() {
	if c.calls == nil || c.cfg.Size == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeCompareWait)
	defer cancel()
	prefix := c.callsKey() + "checked/"
	for {
		m, err := c.calls.Scan(ctx, prefix)
		if err != nil || len(m) >= c.cfg.Size {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fault is one rank's report of why it dropped out (see publishFault).
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

// told is an error this rank read in the store, published by the rank
// that found it: not to be published again.
type told struct{ error }

func (t told) Unwrap() error { return t.error }

// publishFault tells the communicator's other ranks, through the store,
// why this rank is about to drop its links: it found a call mismatched or
// refused one they are in (mismatch true: they fail with ErrMismatch), or
// gave one up before it started (they fail with ErrPeerLost). They see
// only the links go; probe finds the reason here.
func (c *Communicator) publishFault(mismatch bool, text string) {
	if c.calls == nil || !c.published.CompareAndSwap(false, true) {
		return // the first reason is the one the others need
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	text = strings.TrimSuffix(text, ": "+ErrMismatch.Error())
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
	c.calls.Put(ctx, c.callsKey()+"fault/"+strconv.Itoa(c.cfg.Rank), []byte(v))
}

// publishMismatch is publishFault for a mismatch this rank found.
func (c *Communicator) publishMismatch(err error) {
	// Said from the finder's side ("this rank called ..."), so that it
	// reads the same on every rank.
	c.publishFault(true, strings.Replace(err.Error(), "this rank", c.names().WhoIs(c.cfg.Rank), 1))
}

// absent names the ranks that have not published the call this rank is
// in, nor any later one: after a timeout, the ranks it was waiting for.
// Ranks that are themselves waiting publish their call, so the ones
// missing are stopped, busy elsewhere, or in an earlier call.
func (c *Communicator) absent(at map[int]uint64) string {
	mine := collectives.CallNumber(c.g.Recent())
	if at == nil || mine == 0 {
		return ""
	}
	var names []string
	for r := range c.cfg.Size {
		if r != c.cfg.Rank && at[r] < mine {
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
		seen = c.lastSeen(r)
	}
	return fmt.Sprintf("; %s %s never reached call #%d%s", word, strings.Join(names, ", "), mine, seen)
}

// lastSeen says what rank r was doing at the job's last stall report
// (report.go), if one was made: ", at the stall report 2s in it had
// finished allreduce #2 1s before". Only the job's communicator asks.
func (c *Communicator) lastSeen(r int) string {
	if c.calls == nil || c.ext.id != 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	reqs, err := c.calls.Scan(ctx, stallreport.RequestPrefix())
	if err != nil || len(reqs) == 0 {
		return ""
	}
	k := len(reqs)
	v, err := c.calls.Scan(ctx, stallreport.AnswerKey(k, r))
	if err != nil {
		return ""
	}
	b, ok := v[stallreport.AnswerKey(k, r)]
	if !ok {
		return " (nor answered the stall report: stopped or frozen?)"
	}
	st, err := stallreport.Decode(b)
	if err != nil || len(st.Comms) == 0 || st.Comms[0].Running {
		return ""
	}
	return fmt.Sprintf(" (at the stall report it had finished %s %v before)", st.Comms[0].Call, st.Comms[0].Idle.Round(100*time.Millisecond))
}

// also is an error that reads as its first part and matches both: a
// mismatch found after a peer's link was lost is the cause, the loss its
// consequence.
type also struct{ cause, then error }

func (e also) Error() string   { return e.cause.Error() }
func (e also) Unwrap() []error { return []error{e.cause, e.then} }
