//go:build unix

package main

import (
	"bytes"
	"testing"
)

// FuzzReadJoinFrame: what a stranger who proved nothing yet, or a job's
// grun, sends a joiner. readJoinFrame never panics, never allocates past
// maxJoinFrame, and a frame it accepts writes back as the bytes it read.
func FuzzReadJoinFrame(f *testing.F) {
	var b bytes.Buffer
	writeJoinFrame(&b, frameAdmit, []byte("1\x00GRUN_RANK=0\x00GOCOLL_ELASTIC=1"))
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'x'})
	f.Add([]byte{1, 0, 0, 0, frameHello})
	f.Add([]byte{9, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		typ, p, err := readJoinFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(p)+1 > maxJoinFrame {
			t.Fatalf("accepted a frame of %d bytes", len(p)+1)
		}
		var out bytes.Buffer
		writeJoinFrame(&out, typ, p)
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("read % x from % x", out.Bytes(), in)
		}
	})
}
