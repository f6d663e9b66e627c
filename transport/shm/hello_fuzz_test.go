//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gocoll/gocoll/internal/mesh"
)

// FuzzParseHello: parseHello never panics, refuses with errProtocol, and
// accepts only a hello that marshals back to the very same bytes.
func FuzzParseHello(f *testing.F) {
	f.Add(hello{Hello: mesh.Hello{Rank: 1, Size: 4, Slots: 8, SlotSize: 1 << 16, Namespace: 42}, pid: 4242}.marshal())
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

// TestHelloWire pins shm's hello on the wire: a peer of another build
// must read it alike.
func TestHelloWire(t *testing.T) {
	h := hello{Hello: mesh.Hello{Rank: 1, Size: 4, Slots: 8, SlotSize: 1 << 16, Namespace: 42}, pid: 4242}
	want := []byte("SHM1\x01\x00\x00\x00\x04\x00\x00\x00\b\x00\x00\x00\x00\x00\x01\x00\x92\x10\x00\x00*\x00\x00\x00\x00\x00\x00\x00")
	if b := h.marshal(); !bytes.Equal(b, want) {
		t.Fatalf("marshal = %q, want %q", b, want)
	}
	if got, err := parseHello(want); err != nil || got != h {
		t.Fatalf("parseHello = %+v, %v, want %+v", got, err, h)
	}
}
