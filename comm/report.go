package comm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/stallreport"
)

// A job that stops making progress while nobody died gets one report
// (see package internal/stallreport): a call that has waited GOCOLL_STALL
// puts a request in the rendezvous store, every rank answers with what
// each of its communicators is doing, and grun (or, under another
// launcher, the lowest rank waiting in the oldest call) prints which
// ranks wait in which call and what the others last did, and writes it,
// with the laggards' goroutine stacks, to a file. SIGQUIT to grun asks
// for the same report at any time.

// DefaultStall is how long a call may make no progress before the job's
// stall report is made, when neither WithStall nor GOCOLL_STALL says.
const DefaultStall = time.Minute

// WithStall sets how long a call may wait before the job's stall report
// is made (0: never). It overrides GOCOLL_STALL.
func WithStall(d time.Duration) Option {
	return func(s *settings) { s.stall, s.stallSet = d, true }
}

// activity is what the watchdog last saw this communicator doing, for
// the report: reading the clock in the collectives would cost the small
// ones more than the rest of their bookkeeping, and the report needs
// times to the second, not the microsecond.
type activity struct {
	mu       sync.Mutex
	running  bool
	no       uint64 // the latest call begun
	call     string // its description
	since    time.Time
	lastBusy time.Time // the last tick at which a call ran or began
	lastTick time.Time
	// times is when the watchdog saw the calls it saw (the latest
	// sampledCalls), for their records; waited, by job rank, how long the
	// job's communicator's watchdog saw this process wait on it (Stats).
	times  map[uint64]seen
	waited map[int]time.Duration
}

// observe updates the activity on a watchdog tick.
func (c *Communicator) observe(now time.Time, running bool) {
	rec := c.g.Recent()
	n := collectives.CallNumber(rec)
	a := &c.act
	a.mu.Lock()
	defer a.mu.Unlock()
	if n != a.no {
		a.no, a.call = n, collectives.DescribeCall(rec)
		a.lastBusy = now
		if running {
			a.since = now
		}
	}
	if running && !a.running {
		a.since = now
	}
	if running || a.running {
		a.lastBusy = now
	}
	a.running = running
	if running && n != 0 {
		if a.times == nil {
			a.times = make(map[uint64]seen)
		}
		t, ok := a.times[n]
		if !ok {
			t.first = now
			if len(a.times) >= sampledCalls {
				oldest := n
				for k := range a.times {
					oldest = min(oldest, k)
				}
				delete(a.times, oldest)
			}
		}
		t.last = now
		a.times[n] = t
		if c.ext.id == 0 && c.ext.mux != nil && !a.lastTick.IsZero() {
			// The mux is the process's: only the job's communicator
			// counts, or every communicator would count each wait.
			recv, send := c.ext.mux.Busy()
			if a.waited == nil {
				a.waited = make(map[int]time.Duration)
			}
			for _, r := range append(recv, send...) {
				a.waited[r] += now.Sub(a.lastTick)
			}
		}
	}
	a.lastTick = now
}

// status is what this communicator is doing, for a stall report.
func (c *Communicator) status(now time.Time) stallreport.CommStatus {
	a := &c.act
	a.mu.Lock()
	defer a.mu.Unlock()
	s := stallreport.CommStatus{Name: c.ext.name, Rank: c.cfg.Rank, Running: a.running, Call: a.call, CallNo: a.no}
	if a.running {
		s.For = now.Sub(a.since)
	} else if !a.lastBusy.IsZero() {
		s.Idle = now.Sub(a.lastBusy)
	}
	return s
}

// subs lists the live sub-communicators split from the job's, for the
// report.
type subs struct {
	mu   sync.Mutex
	list []*Communicator
}

func (s *subs) add(c *Communicator) {
	s.mu.Lock()
	s.list = append(s.list, c)
	s.mu.Unlock()
}

func (s *subs) remove(c *Communicator) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.list {
		if x == c {
			s.list = append(s.list[:i], s.list[i+1:]...)
			return
		}
	}
}

// answerReports answers every stall report request of the job, on a
// store connection of its own (its gets wait), until Close. Only the
// job's communicator runs it; it answers for the sub-communicators too.
// Its waiting get, which the store fails as soon as a rank departs, is
// also the watch for ranks that leave the job: while New runs (ready
// not yet closed) it ends New's ctx through stop, as a rank that died
// before it connected would otherwise leave the others waiting; after,
// with c.leavers set, it tells the watchdog (see tellLeavers). One
// connection and one goroutine per rank at the store, where there were
// three. ctx ends it if New fails.
func (c *Communicator) answerReports(ctx context.Context, stop context.CancelCauseFunc, ready <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.closed:
		case <-c.aborted:
		case <-ctx.Done():
		}
		cancel()
	}()
	cl, err := bootstrap.DialJob(ctx, c.cfg)
	if err != nil {
		return
	}
	defer cl.Close()
	host, _ := os.Hostname()
	for k := 1; ; k++ {
		if _, err := cl.Get(ctx, stallreport.RequestKey(k)); err != nil {
			// Closed, or a rank left the job: no report is due.
			if errors.Is(err, bootstrap.ErrRankGone) {
				c.departed(ctx, cl, stop, ready)
			}
			return
		}
		// A request before this rank is ready is answered once it is.
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		now := time.Now()
		st := stallreport.Status{Rank: c.cfg.Rank, Host: host, PID: os.Getpid(), Comms: []stallreport.CommStatus{c.status(now)}}
		c.kids.mu.Lock()
		for _, s := range c.kids.list {
			st.Comms = append(st.Comms, s.status(now))
		}
		c.kids.mu.Unlock()
		// If this rank is late, what its program does instead is the
		// interesting part; the report keeps only the late ranks'.
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 2)
		st.Stacks = b.String()
		if len(st.Stacks) > 64<<10 {
			st.Stacks = st.Stacks[:64<<10] + "\n... (cut)"
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		cl.Put(pctx, stallreport.AnswerKey(k, c.cfg.Rank), stallreport.Encode(st))
		pcancel()
	}
}

// departed passes on the departures the store saw: to New, through
// stop, while it runs, and then, if New returned all the same, to the
// watchdog (with c.leavers set).
func (c *Communicator) departed(ctx context.Context, cl *bootstrap.Client, stop context.CancelCauseFunc, ready <-chan struct{}) {
	ds, err := cl.Departures(ctx, 0)
	if err != nil || len(ds) == 0 {
		return
	}
	select {
	case <-ready:
	default:
		stop(fmt.Errorf("%w: %w", ErrPeerLost, blame.RankGone(ds)))
		select {
		case <-ready: // too late to fail New
		case <-ctx.Done():
			return
		}
	}
	if c.leavers != nil {
		c.tellLeavers(ds)
	}
}

// requestReport asks the job for a stall report because this rank's call
// has waited long, unless another rank waiting in it asked first; under
// grun, grun gathers and prints it, else the lowest rank waiting in the
// call does (each of them gathers the answers to the first request
// naming the call, so they agree on who that is).
func (c *Communicator) requestReport(call, why string) {
	store := c.calls
	if store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stallreport.Wait+time.Second)
	defer cancel()
	reqs, err := store.Scan(ctx, stallreport.RequestPrefix())
	if err != nil {
		return
	}
	k := 0
	for key, v := range reqs {
		n, err := strconv.Atoi(strings.TrimPrefix(key, stallreport.RequestPrefix()))
		if err == nil && strings.Contains(string(v), call) && (k == 0 || n < k) {
			k, why = n, string(v)
		}
	}
	if k == 0 {
		k = len(reqs) + 1
		if err := store.Put(ctx, stallreport.RequestKey(k), []byte(why)); err != nil {
			return
		}
		c.log.Info("stall report requested", "request", k, "why", why)
	}
	if c.cfg.Source == "grun" {
		return
	}
	answers := stallreport.Gather(ctx, store.Scan, k, c.jobSize())
	r := stallreport.Build(why, c.jobSize(), answers, nil)
	if r.Call == "" {
		return
	}
	if in := inCall(answers, r, c.jobSize()); len(in) == 0 || in[0] != c.jobRankOf() {
		return
	}
	if c.closing.Load() || c.stopping.Load() {
		// Closed or aborted while the answers came: the call is over,
		// and a report of it now would describe ranks that went on.
		return
	}
	path := r.WriteFile(fmt.Sprintf("gocoll-stall-%d-%d.txt", os.Getpid(), k))
	fmt.Fprintf(os.Stderr, "%sgocoll: stall report written, with the laggards' goroutine stacks, to %s\n", r.Text, path)
	c.log.Warn("stall report", "file", path, "laggards", stallreport.Ranks(r.Laggards), "call", r.Call)
}

// inCall lists, in order, the ranks in the report's oldest call.
func inCall(answers map[int]stallreport.Status, r stallreport.Report, size int) []int {
	var in []int
	for rank := range size {
		for _, c := range answers[rank].Comms {
			call := c.Call
			if c.Name != "" {
				call += " of " + c.Name
			}
			if c.Running && call == r.Call {
				in = append(in, rank)
				break
			}
		}
	}
	return in
}

// jobSize and jobRankOf are the job's size and this rank's job rank (the
// report is about the job's communicator).
func (c *Communicator) jobSize() int {
	if c.ext.mux != nil && c.ext.id != 0 {
		return c.ext.mux.Size()
	}
	return c.cfg.Size
}

func (c *Communicator) jobRankOf() int { return c.names().JobRank(c.cfg.Rank) }
