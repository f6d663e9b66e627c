package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

const (
	// maxLine bounds how much of one line grun holds while waiting for its
	// newline. A longer line is passed on in pieces of this size, each
	// ending in a newline of its own: holding the output lock until the
	// line ends instead would stall every other rank behind one that is
	// itself waiting for them.
	maxLine = 1 << 20

	readSize = 32 << 10
)

// output is where everything grun prints goes through: the ranks' lines and
// grun's own messages. One lock covers both streams so that stdout and
// stderr may even be the same writer.
type output struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
}

func (o *output) write(w io.Writer, p []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := w.Write(p)
	return err
}

// say prints one of grun's own messages to stderr.
func (o *output) say(format string, args ...any) {
	o.write(o.stderr, []byte("grun: "+fmt.Sprintf(format, args...)+"\n"))
}

// forwardLines copies src to emit in whole lines, each preceded by prefix.
// Every call to emit carries only complete lines, so callers that serialise
// emit never mix lines from different sources. A final line without a
// newline gets one, for the same reason. Lines longer than maxLine are cut
// into maxLine pieces. emit must not keep the slice it is given. It returns
// when src returns an error (EOF, or the reader was closed).
func forwardLines(src io.Reader, prefix []byte, emit func([]byte)) {
	buf := make([]byte, readSize)
	var partial, out []byte
	for {
		n, err := src.Read(buf)
		data := buf[:n]
		out = out[:0]
		for len(data) > 0 {
			nl := bytes.IndexByte(data, '\n')
			end := nl
			if nl < 0 {
				end = len(data)
			}
			if room := maxLine - len(partial); end > room {
				out = appendLine(out, prefix, partial, data[:room])
				partial = partial[:0]
				data = data[room:]
				continue
			}
			if nl < 0 {
				partial = append(partial, data...)
				break
			}
			out = appendLine(out, prefix, partial, data[:nl])
			partial = partial[:0]
			data = data[nl+1:]
		}
		if len(out) > 0 {
			emit(out)
		}
		if cap(out) > 4*readSize {
			out = nil // one long line should not pin a megabyte per stream
		}
		if err != nil {
			if len(partial) > 0 {
				emit(appendLine(out[:0], prefix, partial, nil))
			}
			return
		}
	}
}

func appendLine(out, prefix, a, b []byte) []byte {
	out = append(out, prefix...)
	out = append(out, a...)
	out = append(out, b...)
	return append(out, '\n')
}
