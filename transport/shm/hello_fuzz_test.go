//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseHello: parseHello never panics, refuses with errProtocol, and
// accepts only a hello that marshals back to the very same bytes.
func FuzzParseHello(f *testing.F) {
	f.Add(hello{rank: 1, size: 4, slots: 8, slotSize: 1 << 16, pid: 4242, namespace: 42}.marshal())
	f.Add([]byte("SHM0" + string(make([]byte, helloLen-4))))
	f.Add([]byte("SHM1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v does not wrap errProtocol", err)
			}
			return
		}
		if !bytes.Equal(h.marshal(), b) {
			t.Fatalf("parsed % x as %+v, which marshals to % x", b, h, h.marshal())
		}
	})
}
