// Package calltrace is a rank's GOCOLL_TRACE file: where it goes, the
// line each call becomes, and writing the lines, for every communicator
// of the rank at once. GOCOLL_TRACE=FILE writes every call to FILE as
// JSON lines (exact times: the flight recorder then reads the clock),
// FILE's "%r" replaced by the job rank, or ".<rank>" appended if it has
// none. `grun --merge-trace` merges the ranks' files into one Chrome
// trace, which bench/timeline draws as a PNG.
package calltrace

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

// Calls is the flight recorder's size when tracing: the watchdog writes
// the finished calls out every tick (20 ms), so it must hold what the
// fastest calls do in a tick (0.2 µs each: 100 000).
const Calls = 1 << 17

// File is a rank's trace, shared by its communicators; its methods may
// be called from any goroutine.
type File struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	buf    []byte // the lines being written, reused
	closed bool
	err    error // the first failed write, which Close returns
}

// path is where job rank writes its trace, given GOCOLL_TRACE.
func path(pattern string, rank int) string {
	if strings.Contains(pattern, "%r") {
		return strings.ReplaceAll(pattern, "%r", strconv.Itoa(rank))
	}
	return pattern + "." + strconv.Itoa(rank)
}

// Open creates job rank's trace, given GOCOLL_TRACE's pattern, with mode
// 0600 and never through a symlink; its error wraps
// collectives.ErrInvalid (comm.ErrInvalid).
func Open(pattern string, rank int) (*File, error) {
	f, err := privfile.Create(path(pattern, rank))
	if err != nil {
		return nil, fmt.Errorf("GOCOLL_TRACE=%q: %w: %w", pattern, collectives.ErrInvalid, err)
	}
	return &File{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

// Write adds recs, calls of job rank rank on the communicator named
// comm ("" for the job's), as lines. A failed write ends the trace: Close
// returns its error. After Close it writes nothing.
func (t *File) Write(rank int, comm string, recs []collectives.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.err != nil {
		return
	}
	b := t.buf[:0]
	for _, r := range recs {
		b = appendLine(b, rank, comm, r)
	}
	t.buf = b
	if _, err := t.w.Write(b); err != nil {
		t.err = err
	}
}

// Close flushes the trace and closes its file, once; its error is the
// first write's that failed, else the flush's or the close's.
func (t *File) Close() error {
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

// appendLine appends r as a line of the trace: JSON, written by hand as
// the watchdog may have a hundred thousand calls a second to write, and
// encoding/json's reflection and time formatting would take the CPU the
// ranks need. Times are Unix nanoseconds.
func appendLine(b []byte, rank int, comm string, r collectives.Record) []byte {
	b = append(b, `{"rank":`...)
	b = strconv.AppendInt(b, int64(rank), 10)
	if comm != "" {
		b = append(b, `,"comm":`...)
		b = strconv.AppendQuote(b, comm)
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
