package comm

import (
	"expvar"
	"fmt"
	"time"

	"github.com/gocoll/gocoll/collectives"
)

// CallRecord is one call in a communicator's flight recorder, which keeps
// its last calls (256 by default) at a cost of four memory stores a call.
type CallRecord struct {
	// Comm names the communicator as errors do: empty for the job's.
	Comm string `json:"comm,omitempty"`
	// Rank is this rank in it, JobRank in the job (set in traces).
	Rank    int `json:"rank"`
	JobRank int `json:"job_rank"`
	// Seq is the call's number, the same on every rank; Call the call as
	// errors name it ("allreduce #3 (algo ring, 1024 x float32, sum)").
	Seq  uint64 `json:"seq"`
	Call string `json:"call"`
	Kind string `json:"kind"`
	Algo string `json:"algo"`
	Type string `json:"type"`
	// Op is the reduction, empty where the kind has none; Root -1 where
	// it has none.
	Op    string `json:"op,omitempty"`
	Root  int    `json:"root"`
	Count int    `json:"count"`
	// Bytes is the size of this rank's buffer.
	Bytes int `json:"bytes"`
	// Start and End are exact under GOCOLL_TRACE (the recorder reads the
	// clock, ~45 ns a call). Otherwise they are the communicator's
	// watchdog's samples, to its 20 ms tick, for the calls it saw; zero
	// for calls that began and ended between two of its looks. End is
	// zero while the call runs.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Running says the call has not returned; Failed that it returned an
	// error (known under GOCOLL_TRACE, and for the latest call).
	Running bool `json:"running,omitempty"`
	Failed  bool `json:"failed,omitempty"`
	// WaitingOn lists, for a running call, the job ranks this process is
	// receiving from or sending to right now: the ones it waits for.
	WaitingOn []int `json:"waiting_on,omitempty"`
}

// Records returns the calls in the communicator's flight recorder, oldest
// first. It may be called from any goroutine, during a call too.
func (c *Communicator) Records() []CallRecord {
	if c == nil || c.g == nil {
		return nil
	}
	return c.callRecords(c.g.Records(nil), true)
}

// callRecords turns the recorder's records into CallRecords; live says
// whether the latest may still run (not so for a trace's).
func (c *Communicator) callRecords(recs []collectives.Record, live bool) []CallRecord {
	_, running := c.turns.inFlight()
	latest := uint64(0)
	if len(recs) > 0 {
		latest = recs[len(recs)-1].Seq
	}
	var sampled map[uint64]seen
	if !c.g.Timed() {
		a := &c.act
		a.mu.Lock()
		sampled = make(map[uint64]seen, len(a.times))
		for k, v := range a.times {
			sampled[k] = v
		}
		a.mu.Unlock()
	}
	out := make([]CallRecord, 0, len(recs))
	for _, r := range recs {
		cr := CallRecord{Comm: c.ext.name, Rank: c.cfg.Rank, JobRank: c.names().JobRank(c.cfg.Rank), Seq: r.Seq, Call: r.Desc(),
			Kind: r.Kind.String(), Algo: r.Algo.String(), Type: r.DType.String(), Root: r.Root, Count: r.Count,
			Bytes: r.Bytes(), Start: r.Start, End: r.End, Failed: r.Failed}
		switch r.Kind {
		case collectives.AllReduce, collectives.Reduce, collectives.ReduceScatter, collectives.ReduceScatterV:
			cr.Op = r.Op.String()
		case collectives.Barrier:
			cr.Type = ""
		}
		if t, ok := sampled[r.Seq]; ok {
			cr.Start, cr.End = t.first, t.last
		}
		// A call that failed before the group numbered it (refused, given
		// up, found the communicator broken) is not in the recorder: it
		// must not make the call before it, which returned, look failed
		// or running.
		cr.Failed = cr.Failed || r.Seq == c.ext.failedSeq.Load()
		if live && r.Seq == latest {
			cr.Running = running && r.Seq > c.ext.ended.Load()
			if cr.Running {
				cr.End = time.Time{}
				if c.ext.mux != nil {
					recv, send := c.ext.mux.Busy()
					cr.WaitingOn = append(recv, send...)
				}
			}
		}
		out = append(out, cr)
	}
	return out
}

// seen is when the watchdog saw a call: its first and last look.
type seen struct{ first, last time.Time }

// sampledCalls bounds how many calls' sampled times the watchdog keeps:
// the calls slow enough for it to see.
const sampledCalls = 64

// Stats are a communicator's counters since it was made.
type Stats struct {
	// Calls and Bytes count the calls of each kind ("allreduce", ...)
	// and the bytes of this rank's buffers in them.
	Calls map[string]uint64 `json:"calls"`
	Bytes map[string]uint64 `json:"bytes"`
	// Waited is, by job rank, how long this process's calls have waited
	// on that rank, as the watchdog samples it (to its 20 ms tick: short
	// waits are not seen).
	Waited map[int]time.Duration `json:"waited_ns"`
	// Time is, by kind, how long this rank's calls took from their turn
	// (this rank's earlier calls done) to their return, while
	// Communicator.TimeCalls was on: waiting for late peers included, so
	// a kind whose time grows while its bytes do not points at a
	// straggler, not the network.
	Time map[string]time.Duration `json:"time_ns"`
}

// Stats returns the communicator's counters. It may be called from any
// goroutine.
func (c *Communicator) Stats() Stats {
	s := Stats{Calls: map[string]uint64{}, Bytes: map[string]uint64{}, Waited: map[int]time.Duration{}, Time: map[string]time.Duration{}}
	if c == nil || c.g == nil {
		return s
	}
	c.ext.took.into(s.Time)
	calls, bytes := c.g.Counts()
	for k, n := range calls {
		if n > 0 {
			name := collectives.Kind(k).String()
			s.Calls[name], s.Bytes[name] = n, bytes[k]
		}
	}
	c.act.mu.Lock()
	for r, d := range c.act.waited {
		s.Waited[r] = d
	}
	c.act.mu.Unlock()
	return s
}

// PublishStats publishes the communicator's Stats, and its latest calls,
// through the standard library's expvar under name (as /debug/vars
// serves them to metrics scrapers). expvar keeps what is published for
// the life of the process, so a name can be used once: publishing under
// a name in use fails with ErrInvalid. After Close the last counters stay.
func (c *Communicator) PublishStats(name string) error {
	if c == nil {
		return errNil("publishstats")
	}
	if expvar.Get(name) != nil {
		return fmt.Errorf("comm: publishstats: expvar %q is in use: %w", name, ErrInvalid)
	}
	expvar.Publish(name, expvar.Func(func() any {
		recs := c.Records()
		if len(recs) > 8 {
			recs = recs[len(recs)-8:]
		}
		return struct {
			Stats
			Latest []CallRecord `json:"latest"`
		}{c.Stats(), recs}
	}))
	return nil
}
