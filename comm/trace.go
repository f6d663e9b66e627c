package comm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// GOCOLL_TRACE=FILE writes every call of every communicator of the rank
// to FILE as JSON lines (CallRecords, with exact times: the recorder then
// reads the clock), FILE's "%r" replaced by the job rank, or ".<rank>"
// appended if it has none. `grun --merge-trace` merges the ranks' files
// into one Chrome trace and a PNG timeline.

// tracedCalls is the flight recorder's size when tracing: the watchdog
// writes the finished calls out every tick (20 ms), so it must hold what
// the fastest calls do in a tick (0.2 µs each: 100 000).
const tracedCalls = 1 << 17

// traceFile is a rank's trace, shared by its communicators.
type traceFile struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	closed bool
	err    error
}

// tracePath is where job rank writes its trace, given GOCOLL_TRACE.
func tracePath(pattern string, rank int) string {
	if strings.Contains(pattern, "%r") {
		return strings.ReplaceAll(pattern, "%r", strconv.Itoa(rank))
	}
	return pattern + "." + strconv.Itoa(rank)
}

func openTrace(pattern string, rank int) (*traceFile, error) {
	path := tracePath(pattern, rank)
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("GOCOLL_TRACE=%q: %w: %w", pattern, ErrInvalid, err)
	}
	return &traceFile{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

func (t *traceFile) write(recs []CallRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.err != nil {
		return
	}
	enc := json.NewEncoder(t.w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			t.err = err
			return
		}
	}
}

func (t *traceFile) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if t.err != nil {
		return t.err
	}
	return err
}

// drainTrace writes the calls finished since the last drain (all of
// them, running ones too, at the end) to the trace. Only the watchdog
// and Close call it, one after the other.
func (c *Communicator) drainTrace(final bool) {
	if c.trace == nil {
		return
	}
	c.traceMu.Lock()
	defer c.traceMu.Unlock()
	var out []CallRecord
	for _, r := range c.Records() {
		if r.Seq <= c.traced || (r.Running || r.End.IsZero()) && !final {
			continue
		}
		r.JobRank = c.jobRank(c.cfg.Rank)
		out = append(out, r)
	}
	if len(out) == 0 {
		return
	}
	c.traced = out[len(out)-1].Seq
	c.trace.write(out)
}
