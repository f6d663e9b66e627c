package comm

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/privfile"
)

// GOCOLL_TRACE=FILE writes every call of every communicator of the rank
// to FILE as JSON lines (see traceLine; exact times: the recorder then
// reads the clock), FILE's "%r" replaced by the job rank, or ".<rank>"
// appended if it has none. `grun --merge-trace` merges the ranks' files
// into one Chrome trace, which bench/timeline draws as a PNG.

// tracedCalls is the flight recorder's size when tracing: the watchdog
// writes the finished calls out every tick (20 ms), so it must hold what
// the fastest calls do in a tick (0.2 µs each: 100 000).
const tracedCalls = 1 << 17

// traceFile is a rank's trace, shared by its communicators.
type traceFile struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	buf    []byte // the lines being written, reused
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
	f, err := privfile.Create(path) // 0600, never through a symlink
	if err != nil {
		return nil, fmt.Errorf("GOCOLL_TRACE=%q: %w: %w", pattern, ErrInvalid, err)
	}
	return &traceFile{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
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
	recs := c.g.RecordsAfter(c.traced, nil)
	if !final {
		// The latest may still run: it waits for the next drain.
		for len(recs) > 0 && recs[len(recs)-1].End.IsZero() {
			recs = recs[:len(recs)-1]
		}
	}
	if len(recs) == 0 {
		return
	}
	c.traced = recs[len(recs)-1].Seq
	c.trace.mu.Lock()
	defer c.trace.mu.Unlock()
	if c.trace.closed || c.trace.err != nil {
		return
	}
	b := c.trace.buf[:0]
	for _, r := range recs {
		b = c.traceLine(b, r)
	}
	c.trace.buf = b
	if _, err := c.trace.w.Write(b); err != nil {
		c.trace.err = err
	}
}

// traceLine appends r as a line of the trace: JSON, written by hand as
// the watchdog may have a hundred thousand calls a second to write, and
// encoding/json's reflection and time formatting would take the CPU the
// ranks need. Times are Unix nanoseconds.
func (c *Communicator) traceLine(b []byte, r collectives.Record) []byte {
	b = append(b, `{"rank":`...)
	b = strconv.AppendInt(b, int64(c.names().JobRank(c.cfg.Rank)), 10)
	if c.ext.name != "" {
		b = append(b, `,"comm":`...)
		b = strconv.AppendQuote(b, c.ext.name)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"kind":"`...)
	b = append(b, r.Kind.String()...)
	b = append(b, `","algo":"`...)
	b = append(b, r.Algo.String()...)
	b = append(b, '"')
	if r.Kind != collectives.Barrier {
		b = append(b, `,"type":"`...)
		b = append(b, r.DType.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(r.Count), 10)
	switch r.Kind {
	case collectives.AllReduce, collectives.Reduce, collectives.ReduceScatter, collectives.ReduceScatterV:
		b = append(b, `,"op":"`...)
		b = append(b, r.Op.String()...)
		b = append(b, '"')
	}
	if r.Root >= 0 {
		b = append(b, `,"root":`...)
		b = strconv.AppendInt(b, int64(r.Root), 10)
	}
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, int64(r.Bytes()), 10)
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, r.Start.UnixNano(), 10)
	if !r.End.IsZero() {
		b = append(b, `,"end_ns":`...)
		b = strconv.AppendInt(b, r.End.UnixNano(), 10)
	}
	if r.Failed {
		b = append(b, `,"failed":true`...)
	}
	return append(b, "}\n"...)
}
